package discord

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connector/internal/doctabletest"
)

// discordTextCase is one row of docs/settings-parity.md's Discord
// message-text table: where a message with content is sent (the parity
// world's channel 101, or the DM 301), the text the tenant's gateway
// receives and, for a message the connector starts a thread from, the
// thread's name.
type discordTextCase struct {
	where   string
	content string
	want    string
	thread  string
}

var discordTextParity = []discordTextCase{
	{"channel", "<@9000> deploy the build", "deploy the build", "deploy the build"},
	{"channel", "<@!9000>   status?", "status?", "status?"},
	{"channel", "hey <@9000> what's up", "hey  what's up", "hey what's up"},
	{"channel", "<@9000> ask <@502> and <#102>", "ask <@502> and <#102>", "ask and"},
	{"channel", "<@9000> deploy\x1fnow", "deploy\x1fnow", "deploy now"},
	{"channel", "<@9000> ping <@١٢٣>", "ping <@١٢٣>", "ping"},
	{"dm", "\x1f<@9000> hi\x1c", "hi", ""},
}

// textMessage builds a MESSAGE_CREATE from Ada with content, in channel 101
// or the DM 301, whose mentions are the users its <@id> and <@!id> tokens
// name (9000 is the bot).
func textMessage(t *testing.T, where, content string) *wireMessage {
	t.Helper()
	m := map[string]any{"id": "6001", "type": 0, "content": content,
		"author": map[string]any{"id": "501", "username": "ada"}}
	switch where {
	case "channel":
		m["channel_id"], m["guild_id"] = "101", "100"
		m["member"] = map[string]any{"roles": []any{}}
	case "dm":
		m["channel_id"] = "301"
	default:
		t.Fatalf("row %q: unknown place", where)
	}
	var mentions []any
	for _, id := range regexp.MustCompile(`<@!?([0-9]+)>`).FindAllStringSubmatch(content, -1) {
		mentions = append(mentions, map[string]any{"id": id[1], "username": "u" + id[1], "bot": id[1] == "9000"})
	}
	m["mentions"] = mentions
	raw, _ := json.Marshal(m)
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	return &w
}

// TestDiscordMessageTextParity runs every row of the Discord message-text
// table of docs/settings-parity.md through the tenant normalizer (native
// default settings) and checks the event's text and the started thread's
// name.
func TestDiscordMessageTextParity(t *testing.T) {
	t.Parallel()
	for _, c := range discordTextParity {
		t.Run(c.where+" "+strconv.Quote(c.content), func(t *testing.T) {
			n := &normalizer{look: parityWorld(), botID: "9000", pol: newPolicy(TenantConfig{}), startThread: threadFromMessage}
			tr, err := n.message(context.Background(), textMessage(t, c.where, c.content), false)
			if err != nil {
				t.Fatalf("dropped: %v", err)
			}
			if tr.ev.Text != c.want {
				t.Errorf("text %q, want %q", tr.ev.Text, c.want)
			}
			if got := tr.ev.Source.AutoThreadInitialName; got != c.thread {
				t.Errorf("thread name %q, want %q", got, c.thread)
			}
		})
	}
}

// TestDiscordMessageTextDocInSync fails when the Discord message-text
// table of docs/settings-parity.md and discordTextParity differ: each row
// names where the message is sent, its content and (the first code span of
// the native cell) the text the gateway receives, Go-quoted, and the
// native cell names the thread's name as a code span when one is started.
func TestDiscordMessageTextDocInSync(t *testing.T) {
	t.Parallel()
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "### Discord message text")
	if err != nil {
		t.Fatal(err)
	}
	var doc, cases []string
	for i, r := range rows {
		if len(r) != 4 {
			t.Fatalf("row %q: want 4 cells (where, message, native, connector)", r)
		}
		doc = append(doc, doctabletest.Code(r[0])+" "+doctabletest.Code(r[1])+" "+doctabletest.Code(r[2]))
		if i < len(discordTextParity) && discordTextParity[i].thread != "" &&
			!strings.Contains(r[2], "`"+strconv.Quote(discordTextParity[i].thread)+"`") {
			t.Errorf("row %d: the native cell does not name the thread %q", i+1, discordTextParity[i].thread)
		}
	}
	for _, c := range discordTextParity {
		cases = append(cases, c.where+" "+strconv.Quote(c.content)+" "+strconv.Quote(c.want))
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md Discord message-text rows and discordTextParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}
