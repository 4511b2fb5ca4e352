package discord

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"connector/platform"

	"github.com/bwmarrin/discordgo"
)

// TestNormalizeGates covers the native adapter's drops and the cases the
// fixtures do not: each event must be dropped for the named reason.
func TestNormalizeGates(t *testing.T) {
	t.Parallel()
	topic := "t"
	look := &fixtureLookup{
		chans: map[string]chanInfo{
			"101": {ID: "101", Type: discordgo.ChannelTypeGuildText, GuildID: "100", Name: "general", Topic: topic},
			"105": {ID: "105", Type: discordgo.ChannelTypeGuildVoice, GuildID: "100", Name: "Lounge"},
			"106": {ID: "106", Type: discordgo.ChannelTypeGroupDM},
		},
		guilds: map[string]string{"100": "Lab"},
	}
	failThread := func(context.Context, string, string, string) (string, error) { return "", errNotFound }
	base := func(pol TenantConfig) *normalizer {
		return &normalizer{look: look, botID: "9000", pol: newPolicy(pol), startThread: failThread}
	}
	mention := `"mentions":[{"id":"9000"}],"content":"<@9000> hi"`
	author := `"author":{"id":"501","username":"ada"}`
	for _, tc := range []struct {
		name   string
		pol    TenantConfig
		edit   bool
		raw    string
		reason string
	}{
		{"own message", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100","author":{"id":"9000"},` + mention + `}`, "own_message"},
		{"system message", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100","type":7,` + author + `,` + mention + `}`, "system_message"},
		{"embed update", TenantConfig{}, true, `{"id":"1","channel_id":"101","guild_id":"100","embeds":[]}`, "not_an_edit"},
		{"no author", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100"}`, "malformed"},
		{"bot author", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100","author":{"id":"7","bot":true},` + mention + `}`, "bot_author"},
		{"bot without mention", TenantConfig{AllowBots: "mentions"}, false, `{"id":"1","channel_id":"101","guild_id":"100","author":{"id":"7","bot":true},"content":"hi"}`, "bot_author"},
		{"not allowed", TenantConfig{AllowedUsers: []string{"42"}}, false, `{"id":"1","channel_id":"101","guild_id":"100",` + author + `,` + mention + `}`, "user_not_allowed"},
		{"no mention", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100",` + author + `,"content":"hi"}`, "not_mentioned"},
		{"mentions others", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100",` + author + `,"mentions":[{"id":"77"}],"content":"<@77> look"}`, "mentions_others"},
		{"voice auto-thread", TenantConfig{}, false, `{"id":"1","channel_id":"105","guild_id":"100",` + author + `,` + mention + `}`, "auto_thread_unsupported"},
		{"thread creation fails", TenantConfig{}, false, `{"id":"1","channel_id":"101","guild_id":"100",` + author + `,` + mention + `}`, "auto_thread_failed"},
		{"group DM", TenantConfig{}, false, `{"id":"1","channel_id":"106",` + author + `,"content":"hi"}`, "group_dm"},
		{"unknown guild channel", TenantConfig{}, false, `{"id":"1","channel_id":"999","guild_id":"100",` + author + `,` + mention + `}`, "unknown_channel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m wireMessage
			if err := json.Unmarshal([]byte(tc.raw), &m); err != nil {
				t.Fatal(err)
			}
			_, err := base(tc.pol).message(context.Background(), &m, tc.edit)
			if got := dropReason(err); err == nil || got != tc.reason {
				t.Fatalf("err = %v (reason %q), want %q", err, got, tc.reason)
			}
		})
	}
}

func TestThreadName(t *testing.T) {
	t.Parallel()
	long := ""
	for range 90 {
		long += "é"
	}
	for in, want := range map[string]string{
		"<@9000> deploy   the\tbuild": "deploy the build",
		"<@!9000> <@&5> <#6> <@7>":    "Hermes",
		long:                          long[:2*77] + "...",
	} {
		if got := threadName(in, "9000"); got != want {
			t.Errorf("threadName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAttachmentKinds: an attachment's media kind is one of
// platform.MediaKinds, as on every platform ("image", not the message type
// "photo"), and the first attachment gives the message_type.
func TestAttachmentKinds(t *testing.T) {
	t.Parallel()
	n := &normalizer{botID: "9000"}
	for _, tc := range []struct {
		raw         string
		kind, mtype string
	}{
		{`{"attachments":[{"url":"u","content_type":"image/png"},{"url":"v","content_type":"application/pdf"}]}`, "image", "photo"},
		{`{"attachments":[{"url":"u","content_type":"video/mp4"}]}`, "video", "video"},
		{`{"attachments":[{"url":"u","content_type":"audio/ogg"}]}`, "audio", "audio"},
		{`{"flags":8192,"attachments":[{"url":"u","content_type":"audio/ogg"}]}`, "voice", "voice"},
		{`{"attachments":[{"url":"u","content_type":"text/plain"}]}`, "document", "document"},
	} {
		var m wireMessage
		if err := json.Unmarshal([]byte(tc.raw), &m); err != nil {
			t.Fatal(err)
		}
		ev := n.messageEvent(&m)
		if ev.Media[0].Kind != tc.kind || ev.MessageType != tc.mtype {
			t.Errorf("%s: media kind %q, message_type %q; want %q, %q", tc.raw, ev.Media[0].Kind, ev.MessageType, tc.kind, tc.mtype)
		}
		for _, md := range ev.Media {
			if !slices.Contains(platform.MediaKinds, md.Kind) {
				t.Errorf("%s: media kind %q is not one of %q", tc.raw, md.Kind, platform.MediaKinds)
			}
		}
	}
}
