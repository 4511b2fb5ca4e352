package discord

import (
	"reflect"
	"testing"

	"connector/contract"
	"connector/platform"
	"connector/relay/relaytest"
)

// TestAttachmentsPassThrough: a Discord attachment reaches the gateway as
// its CDN URL in media_urls and media[], unchanged (it is public).
func TestAttachmentsPassThrough(t *testing.T) {
	l := startActsLoop(t)
	m := msg("7500", chanGeneral, guildLab, "look at this", true)
	cdn := "https://cdn.discordapp.com/attachments/101/7500/graph.png?ex=1&is=2&hm=3"
	m["attachments"] = []any{map[string]any{"id": "9100", "filename": "graph.png", "size": 20480,
		"url": cdn, "proxy_url": cdn, "content_type": "image/png", "width": 640, "height": 480}}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", m); err != nil {
		t.Fatal(err)
	}
	ev, buf := l.gw.NextInbound(t)
	if buf != "" {
		l.gw.Ack(t, buf)
	}
	want := contract.Media{URL: cdn, MIME: "image/png", Kind: "photo", Size: 20480, Filename: "graph.png"}
	if len(ev.MediaURLs) != 1 || ev.MediaURLs[0] != cdn || len(ev.Media) != 1 || ev.Media[0] != want {
		t.Fatalf("media_urls %v, media %+v, want %+v", ev.MediaURLs, ev.Media, want)
	}
}

// TestChannelContext runs channel context behind the real relay: guild
// messages the mention gates held back ride the channel's next delivered
// message (auto-threaded here) as its context, oldest first, once; another
// channel's, an edit's, an ignored channel's and another tenant's messages
// never do; a DM carries none; the descriptor says supports_context.
func TestChannelContext(t *testing.T) {
	l := startActsLoopWith(t, func(cfg *Config) {
		cfg.Tenants = map[string]TenantConfig{"t1": {IgnoredChannels: []string{chanRandom}}}
	})
	fake, p, gw, gw2 := l.fake, l.p, l.gw, l.gw2
	if d := gw.Hello(t, "discord", "9000"); !d.SupportsContext {
		t.Fatalf("descriptor without supports_context: %+v", d)
	}
	dispatch := func(typ string, m map[string]any) {
		t.Helper()
		if err := fake.Dispatch(waitCtx(t), typ, m); err != nil {
			t.Fatal(err)
		}
	}
	next := func(g *relaytest.Gateway) contract.Event {
		t.Helper()
		ev, buf := g.NextInbound(t)
		if buf != "" {
			g.Ack(t, buf)
		}
		return ev
	}

	dispatch("MESSAGE_CREATE", msg("7200", chanGeneral, guildLab, "the build is red again", false))
	others := msg("7201", chanGeneral, guildLab, "<@777> can you look?", false)
	others["author"] = map[string]any{"id": "502", "username": "grace.h", "global_name": "Grace", "discriminator": "0"}
	others["mentions"] = []any{map[string]any{"id": "777", "username": "linus"}}
	dispatch("MESSAGE_CREATE", others)
	dispatch("MESSAGE_CREATE", msg("7202", threadPlan, guildLab, "lunch?", false))
	dispatch("MESSAGE_CREATE", msg("7203", chanRandom, guildLab, "in an ignored channel", false))
	edited := msg("7200", chanGeneral, guildLab, "the build is red again (edited)", false)
	edited["edited_timestamp"] = "2026-01-15T12:01:00.000000+00:00"
	dispatch("MESSAGE_UPDATE", edited)
	dispatch("MESSAGE_CREATE", msg("7300", chanOther, guildOther, "t2 chatter", false))

	dispatch("MESSAGE_CREATE", msg("7204", chanGeneral, guildLab, "what broke?", true))
	ev := next(gw)
	want := []contract.ContextMessage{
		{Text: "the build is red again", Source: contract.ContextAuthor{UserName: "Ada", UserID: userAda}},
		{Text: "<@777> can you look?", Source: contract.ContextAuthor{UserName: "Grace", UserID: "502"}},
	}
	if ev.MessageID != "7204" || !reflect.DeepEqual(ev.Context, want) {
		t.Fatalf("inbound %s with context %+v, want %+v", ev.MessageID, ev.Context, want)
	}
	dispatch("MESSAGE_CREATE", msg("7205", chanGeneral, guildLab, "and now?", true))
	if ev := next(gw); ev.MessageID != "7205" || ev.Context != nil {
		t.Fatalf("second inbound %s carries context again: %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", msg("7400", chanDMAda, "", "hi in private", false))
	if ev := next(gw); ev.MessageID != "7400" || ev.Context != nil {
		t.Fatalf("DM %s carries context %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", msg("7301", chanOther, guildOther, "and t2?", true))
	ev2 := next(gw2)
	if len(ev2.Context) != 1 || ev2.Context[0].Text != "t2 chatter" {
		t.Fatalf("t2 inbound context %+v, want its own chatter only", ev2.Context)
	}

	// Author-first routing: Grace is t2's, so her messages in t1's guild
	// reach t2; they never carry t1's held-back chatter of that channel.
	if err := p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}, {Kind: platform.BindUser, ID: "502", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	dispatch("MESSAGE_CREATE", msg("7206", chanGeneral, guildLab, "t1's plan, not for t2", false))
	grace := msg("7207", chanGeneral, guildLab, "hello from Grace", false)
	grace["author"] = others["author"]
	dispatch("MESSAGE_CREATE", grace)
	if ev := next(gw2); ev.MessageID != "7207" || ev.Context != nil {
		t.Fatalf("t2 got %s with t1's context %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", msg("7208", chanGeneral, guildLab, "plan?", true))
	if ev := next(gw); ev.MessageID != "7208" || len(ev.Context) != 1 || ev.Context[0].Text != "t1's plan, not for t2" {
		t.Fatalf("t1 got %s with context %+v", ev.MessageID, ev.Context)
	}
}

// TestChannelContextOff: with channel_context off, held-back messages are
// dropped as natively and the next delivered message carries no context.
func TestChannelContextOff(t *testing.T) {
	l := startActsLoopWith(t, func(cfg *Config) {
		cfg.Tenants = map[string]TenantConfig{"t1": {ChannelContext: new(false)}}
	})
	for _, m := range []map[string]any{
		msg("7600", chanGeneral, guildLab, "chatter", false),
		msg("7601", chanGeneral, guildLab, "question", true),
	} {
		if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", m); err != nil {
			t.Fatal(err)
		}
	}
	if ev := l.inbound(t, l.gw); ev.MessageID != "7601" || ev.Context != nil {
		t.Fatalf("inbound %s with context %+v, want none", ev.MessageID, ev.Context)
	}
}
