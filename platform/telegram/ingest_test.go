package telegram

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/media"
	"connector/platform"
)

// ingestCase is one update and what its delivery must look like.
type ingestCase struct {
	name   string
	raw    []byte
	tenant string
	key    string
	check  func(t *testing.T, d platform.Delivery)
}

// callbackRaw is a prompt button pressed by Ada on the bot's message in the
// Dev Forum's topic 42.
const callbackRaw = `{"update_id": 884100100, "callback_query": {"id": "4382bfdwdsb323b2d9", "chat_instance": "-88",
 "from": {"id": 123456789, "is_bot": false, "first_name": "Ada", "last_name": "Lovelace"},
 "message": {"message_id": 3020, "date": 1767268800, "text": "Run it?", "message_thread_id": 42, "is_topic_message": true,
  "from": {"id": 7012345678, "is_bot": true, "first_name": "Hermes", "username": "hermes_test_bot"},
  "chat": {"id": -1001112223334, "title": "Dev Forum", "type": "supergroup", "is_forum": true}},
 "data": "hp1:a1b2c3.0011aabb:once"}}`

func ingestCases(t *testing.T) []ingestCase {
	fx := func(name string) (raw []byte, key string) {
		c := fixture(t, name)
		return c.Raw, c.Key
	}
	var cases []ingestCase
	add := func(name, fixtureName, tenant string, check func(*testing.T, platform.Delivery)) {
		raw, key := fx(fixtureName)
		cases = append(cases, ingestCase{name: name, raw: raw, tenant: tenant, key: key, check: check})
	}
	add("private", "telegram_shared_private_text", "t1", func(t *testing.T, d platform.Delivery) {
		ev := d.Event
		if ev.Text != "what's the weather?" || ev.MessageType != contract.MessageText || ev.MessageID != "17" {
			t.Errorf("event = %+v", ev)
		}
		if s := ev.Source; s.ChatType != "dm" || s.UserName.Value != "Ada Lovelace" || s.IsBot || s.MessageIsEdit {
			t.Errorf("source = %+v", s)
		}
	})
	add("group", "telegram_shared_basic_group", "t1", func(t *testing.T, d platform.Delivery) {
		if s := d.Event.Source; s.ChatType != "group" || s.ChatName.Value != "Book Club" || s.ThreadID.Valid {
			t.Errorf("source = %+v", s)
		}
	})
	add("supergroup of another tenant", "telegram_shared_supergroup", "t2", nil)
	add("forum topic", "telegram_shared_forum_topic", "t1", func(t *testing.T, d platform.Delivery) {
		if d.Event.Source.ThreadID.Value != "42" || d.Event.ReplyTo != nil || d.Event.ReplyToMessageID != "" {
			t.Errorf("topic message: thread %q, reply %+v %q (the topic root is no reply)",
				d.Event.Source.ThreadID.Value, d.Event.ReplyTo, d.Event.ReplyToMessageID)
		}
	})
	add("reply in a topic", "telegram_shared_forum_topic_reply_to_member", "t1", func(t *testing.T, d platform.Delivery) {
		ev := d.Event
		if ev.ReplyToMessageID != "3003" || ev.ReplyTo == nil || ev.ReplyTo.Author != "Bob" ||
			ev.ReplyTo.Text != "status of the roadmap?" || ev.ReplyTo.IsOwn {
			t.Errorf("reply = %q %+v", ev.ReplyToMessageID, ev.ReplyTo)
		}
	})
	add("general topic", "telegram_shared_forum_general_topic", "t1", func(t *testing.T, d platform.Delivery) {
		if d.Event.Source.ThreadID.Value != "1" {
			t.Errorf("thread = %+v, want General (1)", d.Event.Source.ThreadID)
		}
	})
	add("channel post", "telegram_shared_channel_post", "t2", func(t *testing.T, d platform.Delivery) {
		if s := d.Event.Source; s.ChatType != "channel" || s.UserID.Value != s.ChatID || s.UserName.Value != "Hermes News" {
			t.Errorf("source = %+v", s)
		}
	})
	add("edit", "telegram_shared_edited_private_message", "t1", func(t *testing.T, d platform.Delivery) {
		if !d.Event.Source.MessageIsEdit || d.Event.Text != "what's the weather in Paris?" {
			t.Errorf("edit: %+v", d.Event)
		}
	})
	add("photo with caption", "telegram_shared_photo_with_caption_in_group", "t1", func(t *testing.T, d platform.Delivery) {
		if d.Event.MessageType != contract.MessagePhoto || d.Event.Text != "look at this" || len(d.Event.MediaURLs) != 0 {
			t.Errorf("photo: %+v", d.Event)
		}
	})
	cases = append(cases, ingestCase{
		name: "callback query", raw: []byte(callbackRaw), tenant: "t1",
		key: "agent:main:telegram:group:-1001112223334:42",
		check: func(t *testing.T, d platform.Delivery) {
			ev := d.Event
			pr := ev.PromptResponse
			if ev.Text != "/once" || ev.MessageType != contract.MessageCommand || ev.MessageID != "callback:4382bfdwdsb323b2d9" ||
				pr == nil || pr.PromptID != "a1b2c3.0011aabb" || pr.OptionID != "once" || pr.PromptMessageID != "3020" {
				t.Errorf("callback event = %+v, prompt %+v", ev, pr)
			}
			if s := ev.Source; s.UserID.Value != "123456789" || s.MessageID != "3020" || s.IsBot {
				t.Errorf("callback source = %+v", s)
			}
		},
	})
	return cases
}

func checkDelivery(t *testing.T, c ingestCase, d platform.Delivery) {
	t.Helper()
	if d.Kind != platform.KindInbound || d.Tenant != c.tenant || d.Platform != "telegram" || d.SessionKey != c.key ||
		d.Event == nil || d.ChatID != d.Event.Source.ChatID || d.Received.IsZero() {
		t.Fatalf("%s: delivery = %+v, want inbound for %s with key %s", c.name, d, c.tenant, c.key)
	}
	if c.check != nil {
		t.Run(c.name, func(t *testing.T) { c.check(t, d) })
	}
}

func TestWebhookIngest(t *testing.T) {
	e := webhookEnv(t, nil)
	for _, c := range ingestCases(t) {
		if code := e.post(t, c.raw); code != http.StatusOK {
			t.Fatalf("%s: status %d", c.name, code)
		}
		checkDelivery(t, c, e.sink.Next(t))
	}
	// The callback was answered after its delivery.
	calls := e.calls(t, "answerCallbackQuery", 1)
	if calls[0].Form["callback_query_id"] != "4382bfdwdsb323b2d9" {
		t.Errorf("answerCallbackQuery %v", calls[0].Form)
	}
}

func TestWebhookRegistration(t *testing.T) {
	e := webhookEnv(t, func(c *Config) { c.WebhookMaxConnections = 7 })
	reg := e.fake.Registered()
	if reg.URL != "https://connector.example/telegram/webhook" || reg.SecretToken != testSecret || reg.MaxConnections != "7" ||
		reg.AllowedUpdates != `["message","edited_message","channel_post","edited_channel_post","callback_query"]` {
		t.Errorf("setWebhook = %+v", reg)
	}
	if st := e.p.Status(); !st.Ready || !strings.Contains(st.Detail, "@hermes_test_bot") {
		t.Errorf("status = %+v", st)
	}
	if len(e.fake.Calls("getMe")) != 1 {
		t.Error("getMe was not called once")
	}
}

func TestWebhookRejects(t *testing.T) {
	e := webhookEnv(t, func(c *Config) { c.MaxWebhookBytes = 4096 })
	good := fixture(t, "telegram_shared_private_text").Raw
	cases := []struct {
		name   string
		body   []byte
		secret string
		want   int
	}{
		{"wrong secret", good, "wh_Secret-0123456788", http.StatusUnauthorized},
		{"secret prefix", good, testSecret[:5], http.StatusUnauthorized},
		{"no secret", good, "", http.StatusUnauthorized},
		{"oversized", append(append([]byte(`{"update_id":1,"message":{"text":"`), bytes.Repeat([]byte("a"), 5000)...), `"}}`...), testSecret, http.StatusRequestEntityTooLarge},
		{"not json", []byte("update please"), testSecret, http.StatusBadRequest},
		{"json array", []byte(`[{"update_id":1}]`), testSecret, http.StatusBadRequest},
		{"wrong field type", []byte(`{"update_id":"x"}`), testSecret, http.StatusBadRequest},
		{"unsupported update type", []byte(`{"update_id":5,"poll":{"id":"1","question":"q","options":[]}}`), testSecret, http.StatusOK},
		{"service message", []byte(`{"update_id":6,"message":{"message_id":1,"date":1,"chat":{"id":-4001234567,"type":"group","title":"Book Club"},"new_chat_title":"x"}}`), testSecret, http.StatusOK},
		{"unclaimed chat", fixture(t, "telegram_shared_supergroup_unicode_title").Raw, testSecret, http.StatusOK},
		{"own message", []byte(`{"update_id":7,"message":{"message_id":2,"date":1,"text":"hi","from":{"id":7012345678,"is_bot":true,"first_name":"Hermes"},"chat":{"id":123456789,"type":"private","first_name":"Ada"}}}`), testSecret, http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code := e.postSecret(t, c.body, c.secret); code != c.want {
				t.Errorf("status %d, want %d", code, c.want)
			}
			e.sink.Empty(t)
		})
	}
	// The unclaimed chat is logged once at info level, not per update.
	e.post(t, withUpdateID(t, fixture(t, "telegram_shared_supergroup_unicode_title").Raw, 884100999))
	if n := strings.Count(e.logs.String(), `"level":"INFO","msg":"telegram update from a chat no tenant claims dropped"`); n != 1 {
		t.Errorf("unclaimed chat logged %d times at info level, want 1", n)
	}
	t.Run("GET", func(t *testing.T) {
		resp, err := http.Get(e.hook)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET status %d", resp.StatusCode)
		}
	})
}

func TestWebhookDedupeAndRetry(t *testing.T) {
	e := webhookEnv(t, nil)
	raw := fixture(t, "telegram_shared_private_text").Raw
	e.sink.Refuse(1)
	if code := e.post(t, raw); code != http.StatusServiceUnavailable {
		t.Fatalf("refused delivery: status %d, want 503", code)
	}
	e.sink.Empty(t)
	if code := e.post(t, raw); code != http.StatusOK { // Telegram's retry
		t.Fatalf("retry: status %d", code)
	}
	e.sink.Next(t)
	if code := e.post(t, raw); code != http.StatusOK { // a duplicate
		t.Fatalf("duplicate: status %d", code)
	}
	e.sink.Empty(t)
}

func TestWebhookBeforeRun(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, WebhookPath,
		bytes.NewReader(fixture(t, "telegram_shared_private_text").Raw))
	req.Header.Set(secretHeader, testSecret)
	rec := httptest.NewRecorder()
	e.p.serveWebhook(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d before Run, want 503", rec.Code)
	}
}

func TestStopBecomesInterrupt(t *testing.T) {
	e := webhookEnv(t, nil)
	// "/stop@hermes_test_bot now" would reach the gateway as "/stopnow", no
	// stop (docs/settings-parity.md, Telegram message text).
	stop := []byte(`{"update_id":9001,"message":{"message_id":40,"date":1,"text":"/stop@hermes_test_bot",
		"entities":[{"offset":0,"length":21,"type":"bot_command"}],
		"from":{"id":987654321,"is_bot":false,"first_name":"Bob"},
		"chat":{"id":-1001112223334,"title":"Dev Forum","type":"supergroup","is_forum":true},
		"message_thread_id":42,"is_topic_message":true}}`)
	if code := e.post(t, stop); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	d := e.sink.Next(t)
	if d.Kind != platform.KindInterrupt || d.SessionKey != "agent:main:telegram:group:-1001112223334:42" ||
		d.ChatID != "-1001112223334" || d.Tenant != "t1" || d.Event != nil {
		t.Errorf("delivery = %+v, want the topic's interrupt", d)
	}
	// Addressed to another bot: an ordinary command event.
	other := bytes.Replace(stop, []byte("hermes_test_bot"), []byte("other_helper_bot"), 1)
	other = bytes.Replace(other, []byte("9001"), []byte("9002"), 1)
	if code := e.post(t, other); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if d := e.sink.Next(t); d.Kind != platform.KindInbound || d.Event.MessageType != contract.MessageCommand {
		t.Errorf("delivery = %+v, want an inbound command", d)
	}
}

func TestPollingIngest(t *testing.T) {
	e := pollingEnv(t, nil)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	if len(e.fake.Calls("deleteWebhook")) != 1 {
		t.Error("deleteWebhook was not called before polling")
	}
	cases := ingestCases(t)
	for _, c := range cases {
		e.fake.Enqueue(c.raw)
	}
	// Chats are ingested side by side: each chat's updates arrive in their
	// order, the chats' in any.
	waiting := map[string][]ingestCase{}
	for _, c := range cases {
		u := decodeOrFail(t, c.raw)
		in, _ := normalize(u, e.p.mapping.Load())
		waiting[in.event.Source.ChatID] = append(waiting[in.event.Source.ChatID], c)
	}
	for range cases {
		d := e.sink.Next(t)
		if len(waiting[d.ChatID]) == 0 {
			t.Fatalf("unexpected delivery in chat %s: %+v", d.ChatID, d)
		}
		checkDelivery(t, waiting[d.ChatID][0], d)
		waiting[d.ChatID] = waiting[d.ChatID][1:]
	}
	e.calls(t, "answerCallbackQuery", 1)
	// Confirmed updates are not fetched again: a later one arrives alone.
	later := fixture(t, "telegram_shared_private_no_last_name")
	e.fake.Enqueue(withUpdateID(t, later.Raw, 884100200))
	if d := e.sink.Next(t); d.SessionKey != later.Key {
		t.Fatalf("got %s, want %s", d.SessionKey, later.Key)
	}
	if st := e.p.Status(); !strings.Contains(st.Detail, "long polling as @hermes_test_bot") {
		t.Errorf("status = %+v", st)
	}
}

func TestPollingRetriesRefusedDelivery(t *testing.T) {
	e := pollingEnv(t, nil)
	e.sink.Refuse(2)
	first := fixture(t, "telegram_shared_private_text")
	second := fixture(t, "telegram_shared_basic_group")
	e.fake.Enqueue(first.Raw)
	e.fake.Enqueue(first.Raw) // a redelivery is dropped by update_id
	e.fake.Enqueue(second.Raw)
	// Two chats, ingested side by side: each is delivered once, in any order.
	got := []string{e.sink.Next(t).SessionKey, e.sink.Next(t).SessionKey}
	if !slices.Contains(got, first.Key) || !slices.Contains(got, second.Key) {
		t.Fatalf("deliveries %q, want %s and %s", got, first.Key, second.Key)
	}
	// The duplicate was consumed without a delivery: the next update is next.
	third := fixture(t, "telegram_shared_private_command")
	e.fake.Enqueue(withUpdateID(t, third.Raw, 884100200))
	if d := e.sink.Next(t); d.Event.MessageID != "19" {
		t.Fatalf("third delivery %+v", d.Event)
	}
	e.sink.Empty(t)
}

// heldFile is a file the fake Bot API serves only once release was
// called; started is closed when its download began.
type heldFile struct {
	started, released chan struct{}
	release           func()
}

func (f *heldFile) Read(b []byte) (int, error) {
	select {
	case <-f.started:
	default:
		close(f.started)
	}
	<-f.released
	return copy(b, "held file bytes"), nil
}

// slowChats sets up chat X (Ada's DM) with a document whose download holds
// until held.release is called, and chat Y, on the same stripe of
// 64 as X (the striped lock this replaced), with plain text.
func slowChats(t *testing.T, e *env) (doc, after, other []byte, held *heldFile) {
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	e.p.deps.Media = store
	held = &heldFile{started: make(chan struct{}), released: make(chan struct{})}
	held.release = sync.OnceFunc(func() { close(held.released) })
	t.Cleanup(held.release)
	e.fake.AddFile("SLOW", "documents/slow.pdf", 15, func() io.Reader { return held })
	msg := func(id int, chat int64, body string) []byte {
		return []byte(fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1700000000,`+
			`"chat":{"id":%d,"type":"private","first_name":"A"},"from":{"id":%d,"is_bot":false,"first_name":"A"},%s}}`,
			700+id, id, chat, chat, body))
	}
	const x, y = 123456789, 123456789 + 64
	doc = msg(1, x, `"caption":"the report","document":{"file_id":"SLOW","file_unique_id":"U1","file_name":"r.pdf","file_size":15}`)
	return doc, msg(2, x, `"text":"after the report"`), msg(3, y, `"text":"meanwhile"`), held
}

// A download that hangs in chat X delays X's later updates only: chat Y,
// on the stripe X used to lock, is delivered meanwhile; X's updates keep
// their order (long polling: the library hands them over in order). The
// three come in one getUpdates answer: the next poll, whose offset would
// confirm X, waits for X (offsetGate).
func TestSlowDownloadDelaysOnlyItsChatPolling(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Chats = map[string]string{"123456789": "t1", "123456853": "t1"} })
	doc, after, other, held := slowChats(t, e)
	e.fake.Enqueue(doc)
	e.fake.Enqueue(after)
	e.fake.Enqueue(other)
	e.run(t)
	t.Cleanup(held.release) // before Run's cleanup waits for X's ingest
	if d := e.sink.Next(t); d.Event.Text != "meanwhile" {
		t.Fatalf("first delivery %q, want chat Y's while X's download hangs", d.Event.Text)
	}
	select {
	case <-held.started:
	case <-time.After(waitFor):
		t.Fatal("X's download did not start")
	}
	e.sink.Empty(t) // X's two updates wait for the download
	held.release()
	if d := e.sink.Next(t); d.Event.Text != "the report" || len(d.Event.Media) != 1 {
		t.Fatalf("second delivery %q with %d media, want X's document", d.Event.Text, len(d.Event.Media))
	}
	if d := e.sink.Next(t); d.Event.Text != "after the report" {
		t.Fatalf("third delivery %q, want X's next message, after its document", d.Event.Text)
	}
}

// The same with webhooks: Y's request is answered while X's hangs.
func TestSlowDownloadDelaysOnlyItsChatWebhook(t *testing.T) {
	e := webhookEnv(t, func(c *Config) { c.Chats = map[string]string{"123456789": "t1", "123456853": "t1"} })
	doc, _, other, held := slowChats(t, e)
	posted := make(chan int, 1)
	go func() { posted <- e.post(t, doc) }()
	select {
	case <-held.started:
	case <-time.After(waitFor):
		t.Fatal("X's download did not start")
	}
	if code := e.post(t, other); code != http.StatusOK {
		t.Fatalf("Y's update answered %d", code)
	}
	if d := e.sink.Next(t); d.Event.Text != "meanwhile" {
		t.Fatalf("first delivery %q, want chat Y's while X's download hangs", d.Event.Text)
	}
	held.release()
	if code := <-posted; code != http.StatusOK {
		t.Fatalf("X's update answered %d", code)
	}
	if d := e.sink.Next(t); d.Event.Text != "the report" {
		t.Fatalf("second delivery %q, want X's document", d.Event.Text)
	}
}

// An attachment is fetched only up to the Bot API's 20 MiB, whatever the
// update and getFile say of its size (file_size is optional, and a local
// Bot API server serves larger files): one whose bytes run past that is
// delivered without it, and nothing of it stays in the media store.
func TestInboundFileOverTheDownloadLimitIsSkipped(t *testing.T) {
	e := newWebhookEnv(t, nil)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example", MaxBytes: 2 * maxDownloadBytes})
	if err != nil {
		t.Fatal(err)
	}
	e.p.deps.Media = store
	e.startWebhook(t)
	const size = maxDownloadBytes + 1
	e.fake.AddFile("BIG", "documents/big.bin", size, func() io.Reader { return zeros{} })
	doc := []byte(`{"update_id":800001,"message":{"message_id":81,"date":1700000000,` +
		`"chat":{"id":123456789,"type":"private","first_name":"A"},"from":{"id":123456789,"is_bot":false,"first_name":"A"},` +
		`"caption":"big","document":{"file_id":"BIG","file_unique_id":"U9","file_name":"big.bin"}}}`)
	if code := e.post(t, doc); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	if d := e.sink.Next(t); d.Event.Text != "big" || len(d.Event.Media) != 0 {
		t.Fatalf("delivered %q with %d media, want the caption alone", d.Event.Text, len(d.Event.Media))
	}
	if used := store.Stats().Bytes; used != 0 {
		t.Fatalf("the media store keeps %d bytes of the skipped file", used)
	}
}

// zeros reads zero bytes forever.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
