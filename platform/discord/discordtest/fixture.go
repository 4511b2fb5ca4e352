package discordtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connector/platform"
	"connector/platform/platformtest"
)

// TB is the part of testing.TB the fixture helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Token is the bot token the fixture world's platform and fake share.
const Token = "MTAxMDEwMTAxMDEw.fake.bot-token-secret"

// The ids of the fixture world World builds: tenant t1's guild Lab with its
// channels, a thread and a forum, tenant t2's guild Other, and Ada's DM.
const (
	GuildLab    = "100"
	ChanGeneral = "101"
	ChanRandom  = "102"
	ThreadPlan  = "103"
	ChanForum   = "104"
	GuildOther  = "200"
	ChanOther   = "201"
	ChanDMAda   = "301"
	UserAda     = "501"
)

// World fills f with the fixture world: guild Lab (general with a topic,
// random, the thread "Deploy plan" under general, the forum help), guild
// Other (lobby) and Ada's DM channel.
func World(f *Server) {
	topic := "General chat"
	forumTopic := "Ask here"
	f.AddGuild(Guild{ID: GuildLab, Name: "Lab"},
		Channel{ID: ChanGeneral, Type: 0, Name: "general", Topic: &topic},
		Channel{ID: ChanRandom, Type: 0, Name: "random"},
		Channel{ID: ThreadPlan, Type: 11, Name: "Deploy plan", ParentID: ChanGeneral},
		Channel{ID: ChanForum, Type: 15, Name: "help", Topic: &forumTopic},
	)
	f.AddGuild(Guild{ID: GuildOther, Name: "Other"},
		Channel{ID: ChanOther, Type: 0, Name: "lobby"})
	f.AddChannel(Channel{ID: ChanDMAda, Type: 1, Recipients: []Recipient{{ID: UserAda, Username: "ada.l"}}})
}

// MessageCreate builds a MESSAGE_CREATE payload by Ada in channel (of guild,
// "" for a DM); mentionBot mentions the bot (id 9000) first.
func MessageCreate(id, channel, guild, content string, mentionBot bool) map[string]any {
	m := map[string]any{
		"id": id, "channel_id": channel, "content": content, "type": 0, "tts": false,
		"timestamp": "2026-01-15T12:00:00.000000+00:00", "edited_timestamp": nil, "flags": 0,
		"author":      map[string]any{"id": UserAda, "username": "ada.l", "global_name": "Ada", "discriminator": "0"},
		"mentions":    []any{},
		"attachments": []any{}, "embeds": []any{}, "mention_roles": []any{}, "pinned": false, "mention_everyone": false,
	}
	if guild != "" {
		m["guild_id"] = guild
		m["member"] = map[string]any{"nick": nil, "roles": []any{}}
	}
	if mentionBot {
		m["mentions"] = []any{map[string]any{"id": "9000", "username": "hermes", "bot": true}}
		m["content"] = "<@9000> " + content
	}
	return m
}

// SlashCommand is Ada's APPLICATION_COMMAND interaction /model name:gpt in
// channel of guild ("" for a DM), with the interaction token.
func SlashCommand(id, token, guild, channel string) []byte {
	in := map[string]any{
		"id": id, "application_id": "9000", "type": 2, "token": token, "version": 1,
		"channel_id": channel,
		"data": map[string]any{"id": "1", "name": "model", "type": 1, "options": []any{
			map[string]any{"type": 3, "name": "name", "value": "gpt"},
		}},
		"member": map[string]any{"nick": "Captain", "roles": []any{}, "user": map[string]any{
			"id": UserAda, "username": "ada.l", "global_name": "Ada"}},
	}
	if guild != "" {
		in["guild_id"] = guild
		in["channel"] = map[string]any{"id": channel, "type": 0, "guild_id": guild, "name": "general"}
	} else {
		delete(in, "member")
		in["user"] = map[string]any{"id": UserAda, "username": "ada.l", "global_name": "Ada"}
		in["channel"] = map[string]any{"id": channel, "type": 1}
	}
	b, _ := json.Marshal(in)
	return b
}

// Post sends r and returns the answer's status and body.
func Post(tb TB, r *http.Request) (int, string) {
	tb.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		tb.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// LogCapture is a slog handler keeping every record's text (debug and up),
// with a way to wait for a message.
type LogCapture struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
	h       slog.Handler
}

// NewLogCapture returns an empty capture.
func NewLogCapture() *LogCapture {
	c := &LogCapture{changed: make(chan struct{})}
	c.h = slog.NewTextHandler(lockedWriter{c}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return c
}

type lockedWriter struct{ c *LogCapture }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.buf.Write(p)
	close(w.c.changed)
	w.c.changed = make(chan struct{})
	return len(p), nil
}

// Logger is a logger writing into the capture.
func (c *LogCapture) Logger() *slog.Logger { return slog.New(c.h) }

// Text is everything logged so far.
func (c *LogCapture) Text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// WaitFor waits up to 10 s until the log contains s.
func (c *LogCapture) WaitFor(tb TB, s string) {
	tb.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		found := strings.Contains(c.buf.String(), s)
		ch := c.changed
		c.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("log never said %q; log:\n%s", s, c.Text())
		}
	}
}

// WaitOwners waits until the Discord platform p places the fixture world's
// #general in tenant t1: its Gateway session is up and the guild snapshot
// loaded, so it can tell a chat's owner.
func WaitOwners(tb TB, p platform.Platform) {
	tb.Helper()
	platformtest.WaitUntil(tb, "the Discord guild snapshot", func() bool {
		owner, err := p.ChatTenant(context.Background(), ChanGeneral)
		return err == nil && owner == "t1"
	})
}
