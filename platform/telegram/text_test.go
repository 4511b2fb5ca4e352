package telegram

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/go-telegram/bot/models"
	"go.yaml.in/yaml/v3"

	"connector/internal/doctabletest"
	"connector/platform"
	"connector/platform/platformtest"
)

// textParitySettings are tenant t1's settings while the message-text rows
// run: the group -4001234567 is free-response, and in the forum
// -1001112223334 messages that do not address the bot are held back as
// context (observe mode).
const textParitySettings = "{require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: -1001112223334, free_response_chats: -4001234567}"

// textCase is one row of docs/settings-parity.md's Telegram message-text
// table: where a message with text is sent, and the text the tenant's
// gateway receives.
type textCase struct {
	where string
	text  string
	want  string
}

var telegramTextParity = []textCase{
	{"group", "@hermes_bot what's up?", "what's up?"},
	{"group", "@Hermes_Bot: deploy now", "deploy now"},
	{"group", "@hermes_bot ping @hermes_bot", "ping"},
	{"group", "/status@hermes_bot", "/status"},
	{"group", "/model@hermes_bot gpt-5", "/modelgpt-5"},
	{"group", "/stop@hermes_bot now", "/stopnow"},
	{"group", "@hermes_bot, @ops_bot are you both listening?", "@hermes_bot, @ops_bot are you both listening?"},
	{"group", "@hermes_bot hi @ada_l", "@hermes_bot hi @ada_l"},
	{"group", "@hermes_bot", "@hermes_bot"},
	{"group photo", "@hermes_bot look", "look"},
	{"dm", "@hermes_bot hi @ada_l", "hi @ada_l"},
	{"dm", "@hermes_bots hi", "@hermes_bots hi"},
	{"dm", "@HERMEſ_BOT hi", "hi"},
	{"dm", "@hermes_bot\u3000hi\x1f", "hi"},
	{"dm", "ops@hermes_bot.example", "ops.example"},
	{"channel", "@hermes_bot news", "news"},
	{"forum, observed", "mail ops@hermes_bot.example", "mail ops@hermes_bot.example"},
	{"forum photo, observed", "mail ops@hermes_bot.example", "mail ops.example"},
}

// textUpdate builds the update of a message-text row: from Ada (the
// channel's post in a channel) with text, or a photo with that caption,
// and the entities Telegram would send with it.
func textUpdate(t *testing.T, where, text string, updateID int) *models.Update {
	t.Helper()
	msg := map[string]any{"message_id": 40 + updateID, "date": 1760000000,
		"from": map[string]any{"id": 123456789, "is_bot": false, "first_name": "Ada"}}
	place, _ := strings.CutSuffix(where, ", observed")
	place, photo := strings.CutSuffix(place, " photo")
	switch place {
	case "group":
		msg["chat"] = map[string]any{"id": -4001234567, "type": "group", "title": "Book Club"}
	case "forum":
		msg["chat"] = map[string]any{"id": -1001112223334, "type": "supergroup", "title": "Dev Forum", "is_forum": true}
	case "dm":
		msg["chat"] = map[string]any{"id": 123456789, "type": "private", "first_name": "Ada"}
	case "channel":
		msg["chat"] = map[string]any{"id": -1009876543210, "type": "channel", "title": "Hermes News"}
		delete(msg, "from")
	default:
		t.Fatalf("row %q: unknown place", where)
	}
	textKey, entitiesKey := "text", "entities"
	if photo {
		textKey, entitiesKey = "caption", "caption_entities"
		msg["photo"] = []any{map[string]any{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90}}
	}
	msg[textKey] = text
	if e := textEntities(text); len(e) > 0 {
		msg[entitiesKey] = e
	}
	update := map[string]any{"update_id": updateID, "message": msg}
	if place == "channel" {
		update = map[string]any{"update_id": updateID, "channel_post": msg}
	}
	raw, _ := json.Marshal(update)
	var u models.Update
	if err := decodeUpdate(raw, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

// textEntities are the entities Telegram sends with text: a bot_command
// for a leading "/command" (with its "@handle"), and a mention for every
// "@handle" of 5 or more letters, digits or _ that does not follow one.
// Offsets and lengths count UTF-16 code units.
func textEntities(text string) []map[string]any {
	units := func(s string) int { return len(utf16.Encode([]rune(s))) }
	entity := func(typ string, from, to int) map[string]any {
		return map[string]any{"type": typ, "offset": units(text[:from]), "length": units(text[from:to])}
	}
	var out []map[string]any
	i := 0
	if strings.HasPrefix(text, "/") {
		end := strings.IndexFunc(text, unicode.IsSpace)
		if end < 0 {
			end = len(text)
		}
		out = append(out, entity("bot_command", 0, end))
		i = end
	}
	for i < len(text) {
		at := strings.IndexByte(text[i:], '@')
		if at < 0 {
			break
		}
		at += i
		end := at + 1
		for end < len(text) && isHandleByte(text[end]) {
			end++
		}
		if end-at-1 >= 5 && (at == 0 || !isHandleByte(text[at-1])) {
			out = append(out, entity("mention", at, end))
		}
		i = end
	}
	return out
}

// TestTelegramMessageTextParity runs every row of the Telegram
// message-text table of docs/settings-parity.md through live ingest and
// checks the text of the delivered event, or, for a message observe mode
// holds back, of the context the next message of its chat carries.
func TestTelegramMessageTextParity(t *testing.T) {
	var tc TenantConfig
	if err := yaml.Unmarshal([]byte(textParitySettings), &tc); err != nil {
		t.Fatal(err)
	}
	for _, c := range telegramTextParity {
		t.Run(c.where+" "+strconv.Quote(c.text), func(t *testing.T) {
			cfg := Config{BotToken: testToken, Chats: testChats, Tenants: map[string]TenantConfig{"t1": tc}}
			drops := &platformtest.LastDrop{}
			p, err := New(cfg, platform.Deps{Metrics: drops})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.transport.CloseIdleConnections)
			m := *p.mapping.Load()
			m.botUsername = parityBotUsername // as getMe answers
			p.mapping.Store(&m)
			rec := newSink()
			var sink platform.Sink = rec
			p.sink.Store(&sink)
			deliver := func(u *models.Update) *platform.Delivery {
				t.Helper()
				if err := p.handle(context.Background(), u, time.Now()); err != nil {
					t.Fatal(err)
				}
				if d, ok := rec.TryNext(); ok {
					return &d
				}
				return nil
			}
			d := deliver(textUpdate(t, c.where, c.text, 1))
			if strings.HasSuffix(c.where, ", observed") {
				if d != nil || drops.Take() != dropObserved {
					t.Fatalf("not held back as context: %+v", d)
				}
				d = deliver(textUpdate(t, "forum", "@hermes_bot hi", 2))
				if d == nil || len(d.Event.Context) != 1 {
					t.Fatalf("the next message carries no context: %+v", d)
				}
				if got := d.Event.Context[0].Text; got != c.want {
					t.Errorf("context text %q, want %q", got, c.want)
				}
				return
			}
			if d == nil {
				t.Fatalf("not delivered (dropped: %s)", drops.Take())
			}
			if d.Kind != platform.KindInbound {
				t.Fatalf("delivered as kind %v, want an inbound event", d.Kind)
			}
			if got := d.Event.Text; got != c.want {
				t.Errorf("text %q, want %q", got, c.want)
			}
		})
	}
}

// TestTelegramMessageTextDocInSync fails when the Telegram message-text
// table of docs/settings-parity.md and telegramTextParity differ: each row
// names where the message is sent, its text and (the first code span of
// the native cell) the text the gateway receives, Go-quoted.
func TestTelegramMessageTextDocInSync(t *testing.T) {
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "### Telegram message text")
	if err != nil {
		t.Fatal(err)
	}
	var doc, cases []string
	for _, r := range rows {
		if len(r) != 4 {
			t.Fatalf("row %q: want 4 cells (where, message, native, connector)", r)
		}
		doc = append(doc, doctabletest.Code(r[0])+" "+doctabletest.Code(r[1])+" "+doctabletest.Code(r[2]))
	}
	for _, c := range telegramTextParity {
		cases = append(cases, c.where+" "+strconv.Quote(c.text)+" "+strconv.Quote(c.want))
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md Telegram message-text rows and telegramTextParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}

// FuzzCleanTriggerText: any text is cleaned without a panic; on ASCII text
// without \v or \x1c-\x1f, where Go's regexp and Python's re agree, the
// result is the native substitution's.
func FuzzCleanTriggerText(f *testing.F) {
	for _, c := range telegramTextParity {
		f.Add(c.text)
	}
	f.Add("@hermes_bot@hermes_bot")
	f.Add("x@HERMES_BOT,:-- \t y")
	m := &mapping{botUsername: parityBotUsername}
	native := regexp.MustCompile(`(?i)@hermes_bot\b[,:\-]*\s*`)
	f.Fuzz(func(t *testing.T, text string) {
		got := m.cleanTriggerText(text)
		for i := 0; i < len(text); i++ {
			if c := text[i]; c >= 0x80 || c == '\v' || c >= 0x1c && c <= 0x1f {
				return
			}
		}
		want := strings.TrimSpace(native.ReplaceAllString(text, ""))
		if want == "" {
			want = text
		}
		if got != want {
			t.Fatalf("cleanTriggerText(%q) = %q, want %q", text, got, want)
		}
	})
}
