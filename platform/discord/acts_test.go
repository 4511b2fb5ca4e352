package discord

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"connector/contract"
	"connector/platform/discord/discordtest"
)

func TestEgressPromptButtons(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	opts := []map[string]any{
		{"id": "once", "label": "Allow once", "style": "primary"},
		{"id": "session", "label": "Allow for session", "style": "success"},
		{"id": "always", "label": strings.Repeat("Always allow ", 10)},
		{"id": "deny", "label": "Deny", "style": "danger"},
		{"id": "c4", "label": "four"}, {"id": "c5", "label": "five"}, {"id": "other", "label": "Other…", "style": "secondary"},
	}
	question := strings.Repeat("Allow `rm -rf build`? ", 120) // over 2,000 code points: split
	body, _ := json.Marshal(map[string]any{"op": "prompt", "chat_id": chanGeneral, "content": question, "prompt_kind": "approval",
		"prompt_id": "a1b2c3.0000beef", "options": opts, "reply_to": "6001", "timeout_s": 300, "metadata": map[string]any{}})
	r := execute(t, e, "t1", string(body))
	if !r.Success || r.MessageID == "" {
		t.Fatalf("prompt = %+v", r)
	}
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) != 2 || msgs[0].ReplyTo != "6001" || len(msgs[0].Components) != 0 || msgs[1].ID != r.MessageID {
		t.Fatalf("want the question split, the first piece replying, the buttons on the last: %+v", msgs)
	}
	rows := msgs[1].Components
	if len(rows) != 2 || len(rows[0].Components) != 5 || len(rows[1].Components) != 2 {
		t.Fatalf("rows = %+v", rows)
	}
	want := []struct {
		id    string
		style int
	}{{"once", 1}, {"session", 3}, {"always", 2}, {"deny", 4}, {"c4", 2}, {"c5", 2}, {"other", 2}}
	for i, w := range want {
		b := rows[i/5].Components[i%5]
		if b.Type != 2 || b.CustomID != "hp1:a1b2c3.0000beef:"+w.id+":"+e.p.promptTag("t1") || b.Style != w.style || len([]rune(b.Label)) > 80 {
			t.Errorf("button %d = %+v, want custom_id for %s style %d", i, b, w.id, w.style)
		}
	}
	// The tag is keyed by the bot token: whoever reads a button cannot
	// confirm a guessed tenant id by hashing it.
	if guess := sha256.Sum256([]byte("t1/")); strings.Contains(rows[0].Components[0].CustomID, base64.RawURLEncoding.EncodeToString(guess[:6])) {
		t.Errorf("custom_id %q holds the unsalted digest of t1", rows[0].Components[0].CustomID)
	}

	bad := map[string]string{
		"bad prompt id":   `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"no spaces","options":[{"id":"a","label":"A"}],"metadata":{}}`,
		"no options":      `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[],"metadata":{}}`,
		"token too long":  `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"` + strings.Repeat("p", 32) + `","options":[{"id":"` + strings.Repeat("o", 30) + `","label":"A"}],"metadata":{}}`,
		"bad reply_to":    `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"reply_to":"x","metadata":{}}`,
		"bad chat id":     `{"op":"prompt","chat_id":"general","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"metadata":{}}`,
		"too many option": `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[` + strings.TrimSuffix(strings.Repeat(`{"id":"o","label":"A"},`, 26), ",") + `],"metadata":{}}`,
	}
	for name, action := range bad {
		if r := execute(t, e, "t1", action); r.Success || r.Code != contract.CodeBadRequest {
			t.Errorf("%s: %+v, want bad_request", name, r)
		}
	}
	if r := execute(t, e, "t2", `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 prompt in t1's channel = %+v", r)
	}
	if len(e.fake.Messages(chanGeneral)) != 2 {
		t.Errorf("a refused prompt posted something: %+v", e.fake.Messages(chanGeneral))
	}
}

func TestEgressReactAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	sent := execute(t, e, "t1", `{"op":"send","chat_id":"101","content":"working on it","reply_to":null,"metadata":{}}`)
	if !sent.Success {
		t.Fatalf("send = %+v", sent)
	}
	react := func(tenant, chat, msg, emoji string, remove bool) contract.Result {
		body, _ := json.Marshal(map[string]any{"op": "react", "chat_id": chat, "message_id": msg, "emoji": emoji, "remove": remove, "metadata": map[string]any{}})
		return execute(t, e, tenant, string(body))
	}
	for _, step := range []struct {
		emoji  string
		remove bool
		want   []string
	}{{"👀", false, []string{"👀"}}, {"✅", false, []string{"👀", "✅"}}, {"👀", true, []string{"✅"}}, {"hermes:1234567890", false, []string{"✅", "hermes:1234567890"}}} {
		if r := react("t1", chanGeneral, sent.MessageID, step.emoji, step.remove); !r.Success {
			t.Fatalf("react %q remove=%v = %+v", step.emoji, step.remove, r)
		}
		if got := e.fake.Messages(chanGeneral)[0].Reactions; strings.Join(got, " ") != strings.Join(step.want, " ") {
			t.Fatalf("after %q remove=%v reactions = %v, want %v", step.emoji, step.remove, got, step.want)
		}
	}
	if _, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "PUT" && r.Path == "/api/v9/channels/101/messages/"+sent.MessageID+"/reactions/👀/@me"
	}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		msg, emoji string
		code       string
	}{
		"blank emoji":     {sent.MessageID, " ", contract.CodeBadRequest},
		"bad message id":  {"callback:1", "👀", contract.CodeBadRequest},
		"unknown emoji":   {sent.MessageID, "eyes", contract.CodePlatformError},
		"unknown message": {"1234567890123", "👀", contract.CodePlatformError},
	} {
		if r := react("t1", chanGeneral, c.msg, c.emoji, false); r.Success || r.Code != c.code {
			t.Errorf("%s: %+v, want %s", name, r, c.code)
		}
	}
	if r := react("t2", chanGeneral, sent.MessageID, "👀", false); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 react on t1's message = %+v", r)
	}

	del := func(tenant, msg string) contract.Result {
		return execute(t, e, tenant, `{"op":"delete","chat_id":"101","message_id":"`+msg+`","metadata":{}}`)
	}
	if r := del("t2", sent.MessageID); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 delete of t1's message = %+v", r)
	}
	if r := del("t1", "not-an-id"); r.Code != contract.CodeBadRequest {
		t.Errorf("delete of a bad id = %+v", r)
	}
	if r := del("t1", sent.MessageID); !r.Success || len(e.fake.Messages(chanGeneral)) != 0 {
		t.Fatalf("delete = %+v, messages %+v", r, e.fake.Messages(chanGeneral))
	}
	if r := del("t1", sent.MessageID); !r.Success {
		t.Errorf("repeated delete = %+v, want success (already gone)", r)
	}
}

func TestThreadCreateAndRename(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	act := func(tenant string, a map[string]any) contract.Result {
		a["metadata"] = map[string]any{}
		body, _ := json.Marshal(a)
		return execute(t, e, tenant, string(body))
	}
	created := act("t1", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "thread_name": "  Handoff: deploy  "})
	if !created.Success || created.ThreadID == "" || created.MessageID != created.ThreadID {
		t.Fatalf("thread_create = %+v", created)
	}
	if th, ok := e.fake.Channel(created.ThreadID); !ok || th.Type != 11 || th.ParentID != chanGeneral || th.Name != "Handoff: deploy" {
		t.Fatalf("thread = %+v", th)
	}
	sent := act("t1", map[string]any{"op": "send", "chat_id": chanRandom, "content": "anchor", "reply_to": nil})
	anchored := act("t1", map[string]any{"op": "thread_create", "chat_id": chanRandom, "message_id": sent.MessageID, "thread_name": strings.Repeat("long ", 30)})
	if !anchored.Success || anchored.ThreadID != sent.MessageID {
		t.Fatalf("anchored thread_create = %+v (anchor %s)", anchored, sent.MessageID)
	}
	if th, _ := e.fake.Channel(anchored.ThreadID); len([]rune(th.Name)) != 100 {
		t.Fatalf("anchored thread name %q, want cut to 100", th.Name)
	}
	for name, a := range map[string]map[string]any{
		"in a thread":   {"op": "thread_create", "chat_id": threadPlan, "thread_name": "x"},
		"blank name":    {"op": "thread_create", "chat_id": chanGeneral, "thread_name": " "},
		"bad anchor id": {"op": "thread_create", "chat_id": chanGeneral, "thread_name": "x", "message_id": "m1"},
	} {
		if r := act("t1", a); r.Code != contract.CodeBadRequest {
			t.Errorf("%s: %+v, want bad_request", name, r)
		}
	}
	if r := act("t2", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "thread_name": "x"}); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 thread_create in t1's channel = %+v", r)
	}

	// Later inbound from the created thread carries the auto-thread markers;
	// inbound from a thread the connector did not create does not.
	e.dispatch(t, "MESSAGE_CREATE", msg("7300", created.ThreadID, guildLab, "thanks", true))
	if src := e.sink.Next(t).Event.Source; !src.AutoThreadCreated || src.AutoThreadInitialName != "Handoff: deploy" || src.ThreadID.Value != created.ThreadID {
		t.Fatalf("inbound from the created thread: %+v", src)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7301", threadPlan, guildLab, "hi", true))
	if src := e.sink.Next(t).Event.Source; src.AutoThreadCreated || src.AutoThreadInitialName != "" {
		t.Fatalf("inbound from a human's thread: %+v", src)
	}

	rename := func(tenant, chat, thread, name string, guard map[string]any) contract.Result {
		a := map[string]any{"op": "thread_rename", "chat_id": chat, "message_id": thread, "thread_name": name}
		for k, v := range guard {
			a[k] = v
		}
		return act(tenant, a)
	}
	byConnector := map[string]any{"only_if_connector_created": true}
	if r := rename("t1", chanGeneral, created.ThreadID, "Deploy v2.1 rollout", byConnector); !r.Success {
		t.Fatalf("guarded rename of the connector's thread = %+v", r)
	}
	if th, _ := e.fake.Channel(created.ThreadID); th.Name != "Deploy v2.1 rollout" {
		t.Fatalf("name after rename = %q", th.Name)
	}
	// A human renames it: every guarded rename now leaves it alone.
	th, _ := e.fake.Channel(created.ThreadID)
	th.Name = "Ada's name"
	e.fake.AddChannel(th)
	if r := rename("t1", chanGeneral, created.ThreadID, "LLM title", byConnector); r.Success || r.Code != contract.CodeNameChanged {
		t.Errorf("connector-created guard after a human rename = %+v", r)
	}
	if r := rename("t1", created.ThreadID, created.ThreadID, "LLM title", map[string]any{"only_if_current_name": "Deploy v2.1 rollout"}); r.Code != contract.CodeNameChanged {
		t.Errorf("current-name guard after a human rename = %+v", r)
	}
	if th, _ := e.fake.Channel(created.ThreadID); th.Name != "Ada's name" {
		t.Fatalf("a guarded rename overwrote the human's name: %q", th.Name)
	}
	if r := rename("t1", chanGeneral, created.ThreadID, "Ops", map[string]any{"only_if_current_name": "Ada's name"}); !r.Success {
		t.Errorf("current-name guard that matches = %+v", r)
	}
	if r := rename("t1", chanGeneral, threadPlan, "x", byConnector); r.Code != contract.CodeNameChanged {
		t.Errorf("connector-created guard on a human's thread = %+v", r)
	}
	if r := rename("t1", chanRandom, created.ThreadID, "x", nil); r.Code != contract.CodeBadRequest {
		t.Errorf("rename naming the wrong parent = %+v", r)
	}
	other := act("t2", map[string]any{"op": "thread_create", "chat_id": chanOther, "thread_name": "t2's"})
	if !other.Success {
		t.Fatalf("t2 thread_create = %+v", other)
	}
	if r := rename("t1", chanGeneral, other.ThreadID, "hijack", nil); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t1 renaming t2's thread = %+v", r)
	}
	if r := rename("t1", chanGeneral, "x", "y", nil); r.Code != contract.CodeBadRequest {
		t.Errorf("rename of a bad id = %+v", r)
	}
	if th, _ := e.fake.Channel(other.ThreadID); th.Name != "t2's" {
		t.Errorf("t2's thread renamed to %q", th.Name)
	}
}

// TestAutoThreadAnnouncedOnFirstSend: a mention in a text channel is
// auto-threaded; the inbound carries the markers, the first send into the
// new thread answers thread_id and auto_thread_name, later sends do not,
// and later inbound from the thread still carries the markers.
func TestAutoThreadAnnouncedOnFirstSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.dispatch(t, "MESSAGE_CREATE", msg("7500", chanGeneral, guildLab, "plan the v2.1 rollout", true))
	src := e.sink.Next(t).Event.Source
	if !src.AutoThreadCreated || src.AutoThreadInitialName != "plan the v2.1 rollout" || src.ChatID != "7500" || src.ParentChatID != chanGeneral {
		t.Fatalf("auto-threaded inbound = %+v", src)
	}
	send := `{"op":"send","chat_id":"7500","content":"on it","reply_to":null,"metadata":{}}`
	if r := execute(t, e, "t1", send); !r.Success || r.ThreadID != "7500" || r.AutoThreadName != "plan the v2.1 rollout" {
		t.Fatalf("first send = %+v, want the thread announced", r)
	}
	if r := execute(t, e, "t1", send); !r.Success || r.ThreadID != "" || r.AutoThreadName != "" {
		t.Fatalf("second send = %+v, want no announcement", r)
	}
	if r := execute(t, e, "t1", `{"op":"send","chat_id":"103","content":"x","reply_to":null,"metadata":{}}`); r.ThreadID != "" || r.AutoThreadName != "" {
		t.Fatalf("send into a human's thread = %+v", r)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7501", "7500", guildLab, "more", true))
	if src := e.sink.Next(t).Event.Source; !src.AutoThreadCreated || src.AutoThreadInitialName != "plan the v2.1 rollout" {
		t.Fatalf("later inbound from the auto-thread = %+v", src)
	}
}

// TestReactEmojiCannotSteerTheRequest: the emoji is a path segment of the
// reaction route and nothing more: one that would climb out of it (a
// slash, a dot segment) is refused before any request, so t1 cannot react
// in t2's channel by naming it inside the emoji (with api_base_url set,
// the path is sent as it reads).
func TestReactEmojiCannotSteerTheRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	theirs := execute(t, e, "t2", `{"op":"send","chat_id":"`+chanOther+`","content":"t2's message","reply_to":null,"metadata":{}}`)
	mine := execute(t, e, "t1", `{"op":"send","chat_id":"101","content":"t1's message","reply_to":null,"metadata":{}}`)
	if !theirs.Success || !mine.Success {
		t.Fatalf("sends = %+v %+v", theirs, mine)
	}
	n := len(e.fake.Requests())
	for _, emoji := range []string{"../../../../" + chanOther + "/messages/" + theirs.MessageID + "/reactions/👀", "..", ".", "a/b"} {
		body, _ := json.Marshal(map[string]any{"op": "react", "chat_id": chanGeneral, "message_id": mine.MessageID, "emoji": emoji, "metadata": map[string]any{}})
		if r := execute(t, e, "t1", string(body)); r.Code != contract.CodeBadRequest {
			t.Errorf("react with emoji %q = %+v, want bad_request", emoji, r)
		}
	}
	for _, r := range e.fake.Requests()[n:] {
		t.Errorf("a refused react reached Discord: %s %s", r.Method, r.Path)
	}
	if got := e.fake.Messages(chanOther)[0].Reactions; len(got) != 0 {
		t.Fatalf("t1 reacted on t2's message: %v", got)
	}
}
