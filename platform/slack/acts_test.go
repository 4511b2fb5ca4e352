package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/media"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/session"
	"connector/store"
	"connector/vault"
)

// TestPromptRoundTrip: a prompt posts Block Kit buttons whose action_ids
// are hp1 tokens; a press comes back as a prompt_response from the user
// who pressed, in the prompt's thread, before the 200; a second press is
// dropped; the prompt is rewritten without its buttons; a foreign
// action is answered and dropped.
func TestPromptRoundTrip(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Run *make deploy*?","prompt_kind":"approval",
		"prompt_id":"a1b2c3.00000001","options":[{"id":"once","label":"Approve once","style":"primary"},{"id":"deny","label":"Deny","style":"danger"}],
		"metadata":{"thread_id":"1768490100.000100"}}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	c := e.lastCall(t, "chat.postMessage")
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			ActionID string `json:"action_id"`
			Style    string `json:"style"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &blocks); err != nil || len(blocks) != 2 || blocks[1].Type != "actions" ||
		blocks[1].Elements[0].ActionID != "hp1:a1b2c3.00000001:once" || blocks[1].Elements[1].Style != "danger" || c.Form.Get("thread_ts") != "1768490100.000100" {
		t.Fatalf("blocks %s (%v)", c.Form.Get("blocks"), err)
	}
	press := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "1768490100.000100", "hp1:a1b2c3.00000001:once", "Approve once")
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("press: %d %s", code, body)
	}
	d := e.sink.Next(t)
	pr := d.Event.PromptResponse
	if d.Tenant != "t1" || pr == nil || pr.PromptID != "a1b2c3.00000001" || pr.OptionID != "once" || pr.Label != "Approve once" ||
		pr.PromptMessageID != r.MessageID || d.Event.Text != "/once" || d.Event.MessageType != "command" ||
		d.Event.Source.UserID.Value != userAda || d.Event.Source.UserName.Value != "Ada" || d.Event.Source.ThreadID.Value != "1768490100.000100" {
		t.Fatalf("press delivered as %+v (%+v)", d.Event, pr)
	}
	if d.SessionKey != "agent:main:slack:group:T0AAA00001:C0GEN00001:1768490100.000100" {
		t.Fatalf("press keyed %s", d.SessionKey)
	}
	if code, _ := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("second press: %d", code)
	}
	e.sink.Empty(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	updates, err := e.fake.WaitCalls(ctx, "chat.update", 1)
	if err != nil || strings.Contains(updates[0].Form.Get("blocks"), "hp1:") || !strings.Contains(updates[0].Form.Get("blocks"), "Approve once") {
		t.Fatalf("prompt update %v %v", updates, err)
	}
	native := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hermes_approve_once", "Allow once")
	if code, _ := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", native); code != http.StatusOK {
		t.Fatalf("foreign action: %d", code)
	}
	e.sink.Empty(t)
	for _, bad := range []string{`{"op":"prompt","chat_id":"C0GEN00001","content":"?","prompt_id":"p","options":[]}`,
		`{"op":"prompt","chat_id":"C0GEN00001","content":" ","prompt_id":"p","options":[{"id":"a","label":"A"}]}`,
		`{"op":"prompt","chat_id":"C0GEN00001","content":"?","prompt_id":"p p","options":[{"id":"a","label":"A"}]}`} {
		if r := e.execute(t, "t1", bad); r.Code != contract.CodeBadRequest {
			t.Errorf("%s: %+v", bad, r)
		}
	}
}

// TestPressAuthorizedAndMarkedOnce: a press is gated as a slash command
// is (the native adapter authorizes the clicker): a user the tenant's
// allowed_users leaves out is dropped, leaves the buttons and takes no
// prompt, so an admitted user's press is still delivered; a later press
// of that prompt (another option, another user) is a duplicate and does
// not rewrite the prompt with a choice that was never delivered.
func TestPressAuthorizedAndMarkedOnce(t *testing.T) {
	const userCarol, userEve = "U0CAR00003", "U0EVE00005"
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{AllowedUsers: []string{userAda, userCarol}} }, nil)
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_id":"p1",
		"options":[{"id":"once","label":"Approve once"},{"id":"deny","label":"Deny"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	press := func(user, option, label string) {
		t.Helper()
		body := slacktest.Press(teamA.ID, chanGeneral, user, r.MessageID, "", "hp1:p1:"+option, label)
		if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
			t.Fatalf("press of %s: %d %s", user, code, text)
		}
	}
	press(userEve, "deny", "Deny")
	e.sink.Empty(t)
	press(userAda, "once", "Approve once")
	if d := e.sink.Next(t); d.Event.PromptResponse == nil || d.Event.PromptResponse.OptionID != "once" || d.Event.Source.UserID.Value != userAda {
		t.Fatalf("admitted press delivered as %+v", d.Event)
	}
	press(userCarol, "deny", "Deny")
	e.sink.Empty(t)
	e.stop() // waits for the background prompt updates
	e.stop = func() {}
	updates := e.fake.Calls("chat.update")
	if len(updates) != 1 || !strings.Contains(updates[0].Form.Get("blocks"), "Approve once") || !strings.Contains(updates[0].Form.Get("blocks"), userAda) {
		t.Fatalf("prompt updates %+v, want one naming Ada's choice", updates)
	}
}

// TestSharedChannelPressGoesToThePromptsTenant: in a Slack Connect
// channel shared by A (t1's) and B (t2's), a press goes to the tenant
// that posted the prompt, authorized by that tenant's allowed_users, in
// the session of the workspace that posted it, and the prompt is updated
// with that workspace's token, whichever workspace the presser is of and
// whichever of the two Slack names as the payload's team (Slack fills
// team with the posting installation's workspace and user.team_id with
// the presser's, java-slack-sdk#1041, but documents neither): never to
// the presser's tenant, never with its token. A press of the same prompt
// from the other workspace is its duplicate. Symmetrically for t1's
// prompt; a prompt in an unshared channel is answered as before; a press
// of a message that is no remembered prompt is dropped.
func TestSharedChannelPressGoesToThePromptsTenant(t *testing.T) {
	const shared, userEve = "C0SHR00001", "U0EVE00005" // Eve: A's, not admitted by t2
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, func(c *Config) { c.Tenants["t2"] = TenantConfig{AllowedUsers: []string{userBob, userAda}} }, nil)
	e.p.seenIn(shared, teamA.ID) // events of the channel came to both installations
	e.p.seenIn(shared, teamB.ID)
	updates := 0
	prompt := func(tenant, chat, id string) string {
		t.Helper()
		r := e.execute(t, tenant, `{"op":"prompt","chat_id":"`+chat+`","content":"Deploy?","prompt_id":"`+id+`",
			"options":[{"id":"once","label":"Approve once"},{"id":"deny","label":"Deny"}]}`)
		if !r.Success {
			t.Fatalf("%s's prompt in %s: %+v", tenant, chat, r)
		}
		return r.MessageID
	}
	press := func(team, userTeam, chat, user, ts, id string) {
		t.Helper()
		body := slacktest.PressFrom(team, userTeam, chat, user, ts, "", "hp1:"+id+":once", "Approve once")
		if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
			t.Fatalf("press of %s: %d %s", user, code, text)
		}
	}
	// delivered wants the press delivered to tenant in team's session of
	// chat, and the prompt ts updated with team's token.
	delivered := func(tenant string, team slacktest.Team, chat, user, ts string) {
		t.Helper()
		d := e.sink.Next(t)
		if d.Tenant != tenant || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptMessageID != ts ||
			d.Event.Source.UserID.Value != user || d.Event.Source.ScopeID != team.ID ||
			!strings.HasPrefix(d.SessionKey, "agent:main:slack:group:"+team.ID+":"+chat+":") {
			t.Fatalf("press delivered to %s as %+v (%s), want %s's in %s", d.Tenant, d.Event, d.SessionKey, tenant, team.ID)
		}
		e.sink.Empty(t)
		updates++
		ctx, cancel := contextFor()
		defer cancel()
		calls, err := e.fake.WaitCalls(ctx, "chat.update", updates)
		if err != nil {
			t.Fatalf("waiting for update %d of a pressed prompt: %v", updates, err)
		}
		if c := calls[updates-1]; c.Team != team.ID || c.Form.Get("channel") != chat || c.Form.Get("ts") != ts {
			t.Fatalf("prompt %s updated with %s's token in %s at %s", ts, c.Team, c.Form.Get("channel"), c.Form.Get("ts"))
		}
	}
	drops := map[string]int{}
	refused := func(reason string) {
		t.Helper()
		e.sink.Empty(t)
		drops[reason]++
		if n := strings.Count(e.logs.String(), `"reason":"`+reason+`"`); n != drops[reason] {
			t.Fatalf("%d presses dropped as %s, want %d", n, reason, drops[reason])
		}
	}
	for i, c := range []struct {
		name        string
		payloadTeam func(presser slacktest.Team) string
	}{
		{"team is the posting workspace", func(slacktest.Team) string { return teamB.ID }},
		{"team is the presser's workspace", func(presser slacktest.Team) string { return presser.ID }},
	} {
		t.Log(c.name) // shown when a case fails
		id := "p" + strconv.Itoa(i)
		ts := prompt("t2", shared, id)
		if posted := e.lastCall(t, "chat.postMessage"); posted.Team != teamB.ID {
			t.Fatalf("t2's prompt posted with %s's token", posted.Team)
		}
		press(c.payloadTeam(teamA), teamA.ID, shared, userEve, ts, id)
		refused(dropUserNotAllowed) // t1 admits everyone, but the prompt is t2's
		press(c.payloadTeam(teamA), teamA.ID, shared, userAda, ts, id)
		delivered("t2", teamB, shared, userAda, ts)
		press(c.payloadTeam(teamB), teamB.ID, shared, userBob, ts, id)
		e.sink.Empty(t) // a duplicate, whichever workspace it came from
	}
	// Symmetric: t1's prompt pressed by B's Bob goes to t1, updated with
	// A's token, whether Slack names A or B.
	for _, payloadTeam := range []string{teamA.ID, teamB.ID} {
		ts := prompt("t1", shared, "q-"+payloadTeam)
		press(payloadTeam, teamB.ID, shared, userBob, ts, "q-"+payloadTeam)
		delivered("t1", teamA, shared, userBob, ts)
	}
	// Not shared: t1's prompt in its own channel, pressed by its user.
	ts := prompt("t1", chanGeneral, "r1")
	press(teamA.ID, teamA.ID, chanGeneral, userAda, ts, "r1")
	delivered("t1", teamA, chanGeneral, userAda, ts)
	// A message that is no prompt of the connector's.
	press(teamA.ID, teamA.ID, chanGeneral, userAda, "1768490999.000100", "r2")
	refused(dropUnknownPrompt)
	e.stop() // waits for the background prompt updates
	e.stop = func() {}
	if n := len(e.fake.Calls("chat.update")); n != updates {
		t.Fatalf("%d prompt updates, want %d", n, updates)
	}
}

// TestPressOfAPromptPostedOnAnotherInstance: who posted a prompt is in
// the store, so a press that reaches another instance sharing it still
// goes to the prompt's tenant (t2, in a channel shared with t1's
// workspace, pressed by t1's user) and updates it with t2's token.
func TestPressOfAPromptPostedOnAnotherInstance(t *testing.T) {
	const shared = "C0SHR00001"
	st := newSharedStore(t)
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i1")})
	a.p.seenIn(shared, teamB.ID)
	r := a.execute(t, "t2", `{"op":"prompt","chat_id":"`+shared+`","content":"Deploy?","prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	body := slacktest.PressFrom(teamA.ID, teamA.ID, shared, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, text := b.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("press on b: %d %s", code, text)
	}
	if d := b.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || d.Event.Source.ScopeID != teamB.ID {
		t.Fatalf("press delivered to %s as %+v", d.Tenant, d.Event)
	}
	a.sink.Empty(t)
	ctx, cancel := contextFor()
	defer cancel()
	if calls, err := fake.WaitCalls(ctx, "chat.update", 1); err != nil || calls[0].Team != teamB.ID || calls[0].Form.Get("ts") != r.MessageID {
		t.Fatalf("prompt update %+v %v, want one with B's token", calls, err)
	}
}

// TestSlashCommandReplayedOnce: a signed slash command request sent again
// within the signature's window (a captured request replayed, on this
// instance or another on the same store) is answered but not delivered
// again: its trigger_id is claimed once, as a message's ts is.
func TestSlashCommandReplayedOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	body := slacktest.Command(teamA.ID, chanGeneral, userAda, "/reset", "", e.fake.ResponseURL("r1"))
	for i := range 2 {
		if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
			t.Fatalf("copy %d: %d %s", i, code, resp)
		}
	}
	if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", "")); code != http.StatusOK {
		t.Fatalf("the next command: %d %s", code, resp)
	}
	for _, want := range []string{"/reset", "/status"} {
		if d := e.sink.Next(t); d.Event.Text != want {
			t.Fatalf("delivered %q, want %q (the replay of /reset not delivered again)", d.Event.Text, want)
		}
	}
}

// TestSlashCommandReplayKeepsItsResponseURLUse: a replayed slash command
// request does not store its response_url again: the posts the first copy's
// replies took stay counted (Slack takes five per response_url).
func TestSlashCommandReplayKeepsItsResponseURLUse(t *testing.T) {
	e := newEnv(t, nil, nil)
	body := slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", e.fake.ResponseURL("r1"))
	if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("%d %s", code, resp)
	}
	d := e.sink.Next(t)
	e.p.usedResponseURL(t.Context(), "t1", d.SessionKey, 3)
	if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("the replay: %d %s", code, resp)
	}
	if ref, _, _, ok := e.p.takeResponseURL(t.Context(), "t1", d.SessionKey); !ok || ref.used != 3 {
		t.Fatalf("after the replay the response_url is kept %v with %d posts used, want 3", ok, ref.used)
	}
}

// TestSlashCommandReplayLeavesALaterCommandsResponseURL: a slash command
// request replayed after a later command of its session is not delivered
// again, nor does it put its own response_url back in the vault: the
// session's next send is still the later command's reply.
func TestSlashCommandReplayLeavesALaterCommandsResponseURL(t *testing.T) {
	e := newEnv(t, nil, nil)
	first := slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", e.fake.ResponseURL("r1"))
	later := e.fake.ResponseURL("r2")
	for i, body := range [][]byte{first, slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", later), first} {
		if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, resp)
		}
	}
	e.sink.Next(t)
	d := e.sink.Next(t)
	e.sink.Empty(t)
	if _, u, _, ok := e.p.takeResponseURL(t.Context(), "t1", d.SessionKey); !ok || u != later {
		t.Fatalf("after the replay the session keeps the response_url of %q (kept %v), want the later command's", u, ok)
	}
}

// TestSlashCommandBehindAnIntakeEntryRepliesPrivately: a slash command of
// a chat whose message is still fetching its file waits in the intake; its
// reply, however long it waited, goes to its user alone: the two minutes in
// which the session's next send is the command's reply run from when it is
// delivered, not from when its request came.
func TestSlashCommandBehindAnIntakeEntryRepliesPrivately(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // a failed test's download ends
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	answered(t, e.postAsync(t, CommandsPath, "application/x-www-form-urlencoded",
		slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", e.fake.ResponseURL("r1"))), "the slash command")
	clk.Advance(mediaDownloadTimeout)
	for i, want := range []string{"F0SLOW0001.png could not be fetched", "/status"} {
		if d := e.sink.Next(t); !strings.Contains(d.Event.Text, want) {
			t.Fatalf("delivery %d %q, want it to hold %q", i, d.Event.Text, want)
		}
	}
	if r := e.execute(t, "t1", sprintf(slashSend, "all good", "")); !r.Success || r.MessageID != "" {
		t.Fatalf("the command's reply %+v, want it private", r)
	}
	if posts := e.fake.Responses(); len(posts) != 1 || posts[0].ID != "r1" || len(e.fake.Calls("chat.postMessage")) != 0 {
		t.Fatalf("response_url posts %+v, %d public posts; want the reply through r1 alone", posts, len(e.fake.Calls("chat.postMessage")))
	}
}

// TestSlashCommandFollowUp: a slash command is delivered as the native
// adapter delivers it, acknowledged ephemerally; its response_url stays in
// the vault under its session and tenant, never in the event; follow_up
// posts through it (the first reply replacing the acknowledgement), for
// that tenant only.
func TestSlashCommandFollowUp(t *testing.T) {
	e := newEnv(t, nil, nil)
	url := e.fake.ResponseURL("r1")
	code, body := e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", url))
	if code != http.StatusOK || !strings.Contains(body, `"response_type":"ephemeral"`) || !strings.Contains(body, "Running `/model`") {
		t.Fatalf("%d %s", code, body)
	}
	d := e.sink.Next(t)
	raw, _ := json.Marshal(d.Event)
	if d.Event.Text != "/model gpt-5" || d.Event.MessageType != "command" || strings.Contains(string(raw), "response") ||
		d.SessionKey != "agent:main:slack:group:T0AAA00001:C0GEN00001:U0ADA00001" {
		t.Fatalf("%s key %s", raw, d.SessionKey)
	}
	if r := e.execute(t, "t2", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"slack.response_url","content":"x"}`); r.Code != contract.CodeCapabilityMissing {
		t.Fatalf("another tenant's follow_up: %+v", r)
	}
	for i, text := range []string{"**Model** set", "and again"} {
		if r := e.execute(t, "t1", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"slack.response_url","content":"`+text+`"}`); !r.Success {
			t.Fatalf("follow_up %d: %+v", i, r)
		}
	}
	posts := e.fake.Responses()
	if len(posts) != 2 || posts[0].ID != "r1" || posts[0].Body["replace_original"] != true || posts[1].Body["replace_original"] != false ||
		posts[0].Body["text"] != "*Model* set" || posts[0].Body["response_type"] != "ephemeral" {
		t.Fatalf("%+v", posts)
	}
	if r := e.execute(t, "t1", `{"op":"follow_up","session_key":"agent:main:slack:dm:none","kind":"slack.response_url","content":"x"}`); r.Code != contract.CodeCapabilityMissing {
		t.Fatalf("unknown session: %+v", r)
	}
	// Slack takes five posts per response_url: the rest go ephemerally to
	// the command's user in its channel, never publicly.
	for i := range 4 {
		if r := e.execute(t, "t1", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"slack.response_url","content":"more `+strconv.Itoa(i)+`"}`); !r.Success {
			t.Fatalf("follow_up %d: %+v", i, r)
		}
	}
	if n := len(e.fake.Responses()); n != 5 {
		t.Fatalf("%d posts to the response_url", n)
	}
	eph := e.fake.Calls("chat.postEphemeral")
	if len(eph) != 1 || eph[0].Form.Get("channel") != chanGeneral || eph[0].Form.Get("user") != userAda || eph[0].Form.Get("text") != "more 3" ||
		len(e.fake.Calls("chat.postMessage")) != 0 {
		t.Fatalf("ephemeral %+v", eph)
	}
	// /hermes free text is a question, not a command: no response_url kept.
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/hermes", "what changed?", e.fake.ResponseURL("r2")))
	if d := e.sink.Next(t); d.Event.Text != "what changed?" || d.Event.MessageType != "text" || d.SessionKey != "agent:main:slack:dm:T0AAA00001:D0ADA00001" {
		t.Fatalf("%+v %s", d.Event, d.SessionKey)
	}
}

// TestFollowUpPartlySent: a follow_up split in two parts, the first
// through the response_url's last post and the second refused by
// chat.postEphemeral, answers success with an error saying 1 of 2 parts
// went out (platform.SendParts): before, it answered a failure the
// gateway resends, posting the first part again.
func TestFollowUpPartlySent(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", e.fake.ResponseURL("r1")))
	d := e.sink.Next(t)
	followUp := func(content string) contract.Result {
		return e.execute(t, "t1", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"slack.response_url","content":"`+content+`"}`)
	}
	for i := range 4 {
		if r := followUp("reply " + strconv.Itoa(i)); !r.Success {
			t.Fatalf("follow_up %d: %+v", i, r)
		}
	}
	e.fake.Fail404("chat.postEphemeral", 1)
	r := followUp(strings.Repeat("word ", 8000)) // 40,000 characters: two parts
	if n := len(e.fake.Responses()); !r.Success || r.Code != "" || !strings.HasSuffix(r.Error, "(sent 1 of 2 parts; the rest was not sent)") || n != 5 {
		t.Fatalf("follow_up = %+v with %d response_url posts, want success, 1 of 2 sent through the fifth post", r, n)
	}
}

// TestLinkCommand: /link in a DM is redeemed for the DM's author on the
// link desk, off the request, and answered through the command's
// response_url; the command is never delivered.
func TestLinkCommand(t *testing.T) {
	linker := &fakeLinker{tenant: "t3"}
	e := newEnv(t, nil, &platform.Deps{Linker: linker})
	ctx, cancel := contextFor()
	defer cancel()
	code, body := e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/link", "ABC-123", e.fake.ResponseURL("rl")))
	if code != http.StatusOK || body != "" {
		t.Fatalf("%d %s", code, body)
	}
	platformtest.WaitUntil(t, "the state", func() bool { return len(e.fake.Responses()) == 1 })
	if r := e.fake.Responses()[0]; r.ID != "rl" || r.Body["text"] != platform.LinkedReply || r.Body["response_type"] != "ephemeral" {
		t.Fatalf("answer %+v", r)
	}
	if user, got := linker.last(); user != userAda || got != "ABC-123" {
		t.Fatalf("linked %s with %q", user, got)
	}
	e.sink.Empty(t)
	// The same in a DM message ("!link", as Slack's client reads "/" as a
	// command) is consumed and answered in the DM.
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "!link XYZ"), http.StatusOK)
	calls, err := e.fake.WaitCalls(ctx, "chat.postMessage", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := calls[0]; c.Form.Get("channel") != dmAda || c.Form.Get("text") != platform.LinkedReply {
		t.Fatalf("reply %v", c.Form)
	}
	if _, got := linker.last(); got != "XYZ" {
		t.Fatalf("linked with %q", got)
	}
	e.sink.Empty(t)
	// In a channel, /link is refused without redeeming.
	code, body = e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/link", "ABC", ""))
	if code != http.StatusOK || !strings.Contains(body, "direct message") {
		t.Fatalf("%d %s", code, body)
	}
	if _, got := linker.last(); got != "XYZ" {
		t.Fatal("a /link outside a DM was redeemed")
	}
}

type fakeLinker struct {
	tenant string

	mu         sync.Mutex
	user, code string
}

func (l *fakeLinker) Link(_ context.Context, _, user, code string) (string, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.user, l.code = user, code
	return l.tenant, time.Time{}, nil
}

func (l *fakeLinker) last() (user, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.user, l.code
}

// newMediaStore is a media store with a public URL.
func newMediaStore(t *testing.T) *media.Store {
	t.Helper()
	ms, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "https://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestSendMediaExternalUpload: send_media streams the object to the
// external upload URL byte for byte, completes the upload into the chat
// and thread with the caption, and answers the file message's ts.
func TestSendMediaExternalUpload(t *testing.T) {
	ms := newMediaStore(t)
	e := newEnv(t, nil, &platform.Deps{Media: ms})
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	info, err := ms.Put("t1", strings.NewReader(string(data)), "application/pdf", "report.pdf")
	if err != nil {
		t.Fatal(err)
	}
	r := e.execute(t, "t1", `{"op":"send_media","chat_id":"C0GEN00001","media_kind":"document","source_url":"`+ms.URL(info.ID)+
		`","content":"the **report**","filename":"q3.pdf","metadata":{"thread_id":"1768490100.000100"}}`)
	if !r.Success || r.MessageID == "" {
		t.Fatalf("%+v", r)
	}
	sum := sha256.Sum256(data)
	ups := e.fake.Uploads()
	if len(ups) != 1 || ups[0].SHA256 != hex.EncodeToString(sum[:]) || ups[0].Filename != "q3.pdf" || ups[0].Channel != chanGeneral ||
		ups[0].ThreadTS != "1768490100.000100" || ups[0].Comment != "the *report*" || ups[0].TS != r.MessageID {
		t.Fatalf("upload %+v", ups)
	}
	if r := e.execute(t, "t2", `{"op":"send_media","chat_id":"C0ACME0001","media_kind":"document","source_url":"`+ms.URL(info.ID)+`","content":""}`); r.Code != contract.CodeBadRequest {
		t.Fatalf("another tenant's media: %+v", r)
	}
}

// TestInboundFileRehosted: a file share's file is fetched with its
// workspace's token into the media store and listed in the event; the
// Slack URL and the token never reach it. A file the token cannot read
// (Slack's sign-in page) is named in a notice instead.
func TestInboundFileRehosted(t *testing.T) {
	ms := newMediaStore(t)
	e := newEnv(t, nil, &platform.Deps{Media: ms})
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 5000)...)
	url := e.fake.AddFile(teamA.ID, "F0IMG00001", "shot.png", "image/png", png)
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "what's wrong here?")
	ev["subtype"] = "file_share"
	ev["files"] = []any{map[string]any{"id": "F0IMG00001", "name": "shot.png", "mimetype": "image/png", "size": len(png),
		"url_private": url, "url_private_download": url}}
	e.event(t, teamA, "Ev1", ev, http.StatusOK)
	d := e.sink.Next(t)
	raw, _ := json.Marshal(d.Event)
	if d.Event.MessageType != "photo" || len(d.Event.MediaURLs) != 1 || !strings.HasPrefix(d.Event.MediaURLs[0], "https://connector.example/relay/media/") ||
		strings.Contains(string(raw), "files-pri") || strings.Contains(string(raw), "xoxb") || d.Event.Media[0].Kind != "image" {
		t.Fatalf("%s", raw)
	}
	id := strings.TrimPrefix(d.Event.MediaURLs[0], "https://connector.example/relay/media/")
	obj, err := ms.Open("t1", id)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(png)+1)
	n, _ := obj.Section().Read(got)
	obj.Close()
	if n != len(png) || string(got[:n]) != string(png) {
		t.Fatalf("re-hosted %d bytes", n)
	}
	// Workspace B's file is not workspace A's token's: the sign-in page.
	other := e.fake.AddFile(teamB.ID, "F0DOC00002", "notes.txt", "text/plain", []byte("secret"))
	ev = slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "", "and this")
	ev["subtype"] = "file_share"
	ev["files"] = []any{map[string]any{"id": "F0DOC00002", "name": "notes.txt", "mimetype": "text/plain", "size": 6, "url_private": other}}
	e.event(t, teamA, "Ev2", ev, http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.MediaURLs) != 0 || !strings.HasPrefix(d.Event.Text, "[Slack attachment notice]") || strings.Contains(d.Event.Text, "secret") {
		t.Fatalf("%+v", d.Event)
	}
	// A small text file of the workspace is put in front of the text.
	txt := e.fake.AddFile(teamA.ID, "F0TXT00003", "todo.md", "text/markdown", []byte("- ship it"))
	ev = slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000300", "", "see the list")
	ev["files"] = []any{map[string]any{"id": "F0TXT00003", "name": "todo.md", "mimetype": "text/markdown", "size": 9, "url_private": txt}}
	e.event(t, teamA, "Ev3", ev, http.StatusOK)
	if d := e.sink.Next(t); d.Event.Text != "[Content of todo.md]:\n- ship it\n\nsee the list" || d.Event.MessageType != "document" {
		t.Fatalf("%q %s", d.Event.Text, d.Event.MessageType)
	}
	// A Slack Connect stub (no URLs) is completed with files.info first.
	e.fake.AddFile(teamA.ID, "F0CON00004", "plan.txt", "text/plain", []byte("step 1"))
	ev = slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000400", "", "shared")
	ev["files"] = []any{map[string]any{"id": "F0CON00004", "file_access": "check_file_info"}}
	e.event(t, teamA, "Ev4", ev, http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.MediaURLs) != 1 || d.Event.Text != "[Content of plan.txt]:\nstep 1\n\nshared" || len(e.fake.Calls("files.info")) != 1 {
		t.Fatalf("%+v", d.Event)
	}
	// One Slack will not describe is named in the notice.
	ev = slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000500", "", "gone")
	ev["files"] = []any{map[string]any{"id": "F0GONE0005", "file_access": "check_file_info"}}
	e.event(t, teamA, "Ev5", ev, http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.MediaURLs) != 0 || !strings.Contains(d.Event.Text, "F0GONE0005 could not be fetched") {
		t.Fatalf("%+v", d.Event)
	}
	// A file URL on a host that is neither Slack's nor the Web API's never
	// gets the token: the file is named in the notice.
	var asked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
	t.Cleanup(elsewhere.Close)
	ev = slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000600", "", "look")
	ev["files"] = []any{map[string]any{"id": "F0ELSE0006", "name": "x.txt", "mimetype": "text/plain", "size": 3, "url_private": elsewhere.URL + "/x.txt"}}
	e.event(t, teamA, "Ev6", ev, http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.MediaURLs) != 0 || !strings.Contains(d.Event.Text, "x.txt could not be fetched") || asked.Load() != 0 {
		t.Fatalf("%+v, asked %d", d.Event, asked.Load())
	}
}

// TestDraftStreams: draft frames stream into one message of the thread
// (chat.startStream, then appendStream with what each frame adds); the
// final frame stops it with the rest and answers its ts; a repeated seal
// answers the same; a send extending an open stream seals it instead of
// posting the reply twice.
func TestDraftStreams(t *testing.T) {
	e := newEnv(t, nil, nil)
	frame := func(id int, content string, final bool) contract.Result {
		b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": id, "content": content, "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
		return e.execute(t, "t1", string(b))
	}
	first := frame(7, "Hello", false)
	if !first.Success || first.MessageID == "" {
		t.Fatalf("%+v", first)
	}
	if c := e.lastCall(t, "chat.startStream"); c.Form.Get("thread_ts") != "1768490100.000100" || c.Form.Get("recipient_user_id") != userAda ||
		c.Form.Get("recipient_team_id") != teamA.ID || c.Form.Get("markdown_text") != "Hello" {
		t.Fatalf("start %v", c.Form)
	}
	frame(7, "Hello, wor▌", false)
	if c := e.lastCall(t, "chat.appendStream"); c.Form.Get("markdown_text") != ", wor" {
		t.Fatalf("append %v", c.Form)
	}
	sealed := frame(7, "Hello, world.", true)
	if !sealed.Success || sealed.MessageID != first.MessageID {
		t.Fatalf("seal %+v", sealed)
	}
	if again := frame(7, "Hello, world.", true); again.MessageID != first.MessageID || len(e.fake.Calls("chat.stopStream")) != 1 {
		t.Fatalf("repeated seal %+v", again)
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != "Hello, world." || m[0].Stream {
		t.Fatalf("streamed message %+v", m)
	}
	frame(8, "Second", false)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"Second answer","metadata":{"thread_id":"1768490100.000100"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 2 || m[1].Text != "Second answer" || len(e.fake.Calls("chat.postMessage")) != 0 {
		t.Fatalf("the send posted again: %+v", m)
	}
	if r := e.execute(t, "t1", `{"op":"draft","chat_id":"C0GEN00001","draft_id":9,"content":"x","metadata":{}}`); r.Code != contract.CodeBadRequest {
		t.Fatalf("a draft outside a thread: %+v", r)
	}
}

// TestEditsAndMentionsAcrossTurns: an edit that adds a mention to a
// message the gate held back starts a turn with the original ts; an edit
// of a message that started one does not; a reply in a thread the bot
// posted into needs no mention.
func TestEditsAndMentionsAcrossTurns(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", "", "can someone look?"), http.StatusOK)
	e.sink.Empty(t)
	edit := map[string]any{"type": "message", "subtype": "message_changed", "channel": chanGeneral, "channel_type": "channel",
		"ts": "1768490160.000900", "event_ts": "1768490160.000900", "hidden": true,
		"message": map[string]any{"client_msg_id": "m1", "type": "message", "user": userAda, "ts": "1768490100.000100",
			"text": "<@U0BOTA0001> can someone look?", "team": teamA.ID, "edited": map[string]any{"user": userAda, "ts": "1768490160.000900"}}}
	e.event(t, teamA, "Ev2", edit, http.StatusOK)
	d := e.sink.Next(t)
	if d.Event.MessageID != "1768490100.000100" || !d.Event.Source.MessageIsEdit || d.Event.Text != "can someone look?" {
		t.Fatalf("%+v", d.Event)
	}
	edit["event_ts"], edit["ts"] = "1768490200.000100", "1768490200.000100"
	e.event(t, teamA, "Ev3", edit, http.StatusOK)
	e.sink.Empty(t)
	// The bot answers in the thread; an unmentioned reply there wakes it.
	e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"looking","metadata":{"thread_id":"1768490100.000100"}}`)
	e.event(t, teamA, "Ev4", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490300.000100", "1768490100.000100", "thanks"), http.StatusOK)
	if d := e.sink.Next(t); d.Event.Text != "thanks" || d.SessionKey != "agent:main:slack:group:T0AAA00001:C0GEN00001:1768490100.000100" {
		t.Fatalf("%+v %s", d.Event, d.SessionKey)
	}
	// A reply under a root the bot posted (on another instance, say) wakes
	// it too: the root is read from Slack.
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: "1768400000.000100", User: teamA.BotUser, BotID: teamA.BotID, Text: "digest"})
	e.event(t, teamA, "Ev5", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490400.000100", "1768400000.000100", "ok"), http.StatusOK)
	if d := e.sink.Next(t); d.Event.Source.ThreadID.Value != "1768400000.000100" {
		t.Fatalf("%+v", d.Event.Source)
	}
	_ = session.Key
	_ = time.Second
}

// TestDraftStreamMovesWithTheGateway: a gateway whose connection drops
// mid-stream goes on with the same draft on another instance: its frames
// there append to the message the first instance started (one message,
// one chat.startStream), its seal there stops that stream, and its retried
// seal, wherever it lands, answers the same message without posting again.
func TestDraftStreamMovesWithTheGateway(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i1")})
	frame := func(e *env, id int, content string, final bool) contract.Result {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": id, "content": content, "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
		return e.execute(t, "t1", string(raw))
	}
	first := frame(a, 7, "Hello", false)
	if !first.Success {
		t.Fatalf("%+v", first)
	}
	if r := frame(b, 7, "Hello, wor▌", false); !r.Success || r.MessageID != first.MessageID {
		t.Fatalf("the next frame on b: %+v", r)
	}
	if c := b.lastCall(t, "chat.appendStream"); c.Form.Get("markdown_text") != ", wor" || c.Form.Get("ts") != first.MessageID {
		t.Fatalf("append %v", c.Form)
	}
	// Back on a (another reconnect), a frame appends to what b streamed.
	if r := frame(a, 7, "Hello, world", false); !r.Success {
		t.Fatalf("a frame back on a: %+v", r)
	}
	sealed := frame(b, 7, "Hello, world.", true)
	if !sealed.Success || sealed.MessageID != first.MessageID {
		t.Fatalf("seal %+v", sealed)
	}
	for _, e := range []*env{a, b} {
		if again := frame(e, 7, "Hello, world.", true); !again.Success || again.MessageID != first.MessageID {
			t.Fatalf("a retried seal: %+v", again)
		}
	}
	if m := fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != "Hello, world." || m[0].Stream {
		t.Fatalf("streamed messages %+v", m)
	}
	if n, s := len(fake.Calls("chat.startStream")), len(fake.Calls("chat.stopStream")); n != 1 || s != 1 {
		t.Fatalf("%d streams started, %d stopped", n, s)
	}
	// The next draft, started on b, is sealed by a's send of its text.
	frame(b, 8, "Second", false)
	if r := a.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"Second answer","metadata":{"thread_id":"1768490100.000100"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	if m := fake.Messages(chanGeneral); len(m) != 2 || m[1].Text != "Second answer" || m[1].Stream || len(fake.Calls("chat.postMessage")) != 0 {
		t.Fatalf("the send posted again: %+v", m)
	}
}

// TestInboundFilesShareOneDeadline: the files of a message are fetched
// within one deadline together, on the platform's clock: when the first
// stalls until the deadline, the others are not waited for one deadline
// each (which would hold the chat for up to half an hour); the message is
// stored with every file named in the notice.
func TestInboundFilesShareOneDeadline(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 8)
	var files []any
	for i := range 3 {
		id := sprintf("F0SLOW000%d", i)
		url := e.fake.AddStalledFile(teamA.ID, id, id+".png", "image/png", started)
		files = append(files, map[string]any{"id": id, "name": id + ".png", "mimetype": "image/png", "size": 10, "url_private": url})
	}
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "three shots")
	ev["files"] = files
	codes := make(chan int, 1)
	go func() {
		code, _ := e.post(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", ev))
		codes <- code
	}()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first file's download", waitFor)
	}
	clk.Advance(mediaDownloadTimeout)
	d := e.sink.Next(t)
	for i := range 3 {
		if !strings.Contains(d.Event.Text, sprintf("F0SLOW000%d.png could not be fetched", i)) {
			t.Fatalf("file %d not in the notice: %q", i, d.Event.Text)
		}
	}
	if code := <-codes; code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
}

// TestSlowFilesKeepTheirClaim: a retry of a message whose files are still
// being fetched (its 200 lost, Slack retries after 1 minute, possibly on
// another instance) is busy (503), not handled a second time.
func TestSlowFilesKeepTheirClaim(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	var envs []*env
	for _, name := range []string{"i0", "i1"} {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		envs = append(envs, newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: n, Media: newMediaStore(t), Clock: clk}))
	}
	a, b := envs[0], envs[1]
	started := make(chan string, 4)
	url := fake.AddStalledFile(teamA.ID, "F0SLOW0001", "slow.png", "image/png", started)
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "a slow shot")
	ev["files"] = []any{map[string]any{"id": "F0SLOW0001", "name": "slow.png", "mimetype": "image/png", "size": 10, "url_private": url}}
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", ev)
	first := make(chan int, 1)
	go func() { code, _ := a.post(t, EventsPath, "application/json", body); first <- code }()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first copy's download", waitFor)
	}
	clk.Advance(time.Minute) // Slack's second retry
	retry := make(chan int, 1)
	go func() { code, _ := b.post(t, EventsPath, "application/json", body); retry <- code }()
	select {
	case code := <-retry:
		if code != http.StatusServiceUnavailable {
			t.Errorf("the retry got %d while the first copy was fetching its files, want 503", code)
		}
	case <-started:
		t.Error("the retry fetched the files again while the first copy was fetching them")
	case <-time.After(waitFor):
		t.Errorf("timed out after %v waiting for the retry's answer", waitFor)
	}
	clk.Advance(mediaDownloadTimeout)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first copy got %d", code)
	}
	if t.Failed() {
		<-retry
	}
	// The 200 came before the files (the intake); the delivery follows.
	platformtest.WaitUntil(t, "the first copy's delivery", func() bool { return a.sink.Taken()+b.sink.Taken() > 0 })
	if n := a.sink.Taken() + b.sink.Taken(); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}

// TestPressOfAnEarlierTenantsPrompt: t1 posted a prompt, and is deleted
// and created again under its id (the vault's Since moves to its new
// start): a press of the earlier t1's prompt is dropped, not delivered to
// the new t1; a press of the new t1's own prompt is.
func TestPressOfAnEarlierTenantsPrompt(t *testing.T) {
	eachSkew(t, func(t *testing.T, skewed bool) {
		clk := clocktest.New(time.Now()) // requests are signed at the time of day
		var began atomic.Int64
		since := func(tenant string) time.Time {
			if us := began.Load(); tenant == "t1" && us != 0 {
				return time.UnixMicro(us)
			}
			return time.Time{}
		}
		if skewed {
			began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
		}
		e := newEnvOn(t, newFake(t), nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
		press := func(id string) {
			t.Helper()
			r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_id":"`+id+`","options":[{"id":"once","label":"Approve once"}]}`)
			if !r.Success {
				t.Fatalf("%+v", r)
			}
			if id == "p1" { // posted by the earlier t1, pressed once t1 was made again
				clk.Advance(time.Second)
				began.Store(createdAt(clk.Now(), skewed))
				clk.Advance(time.Second)
			}
			body := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:"+id+":once", "Approve once")
			if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
				t.Fatalf("press of %s: %d %s", id, code, text)
			}
		}
		press("p1")
		e.sink.Empty(t)
		press("p2")
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p2" {
			t.Fatalf("the new t1's press delivered to %s as %+v", d.Tenant, d.Event)
		}
	})
}

// TestRemadeTenantStreamsAfresh: t1 sealed a draft stream and left
// another open in a channel, and is deleted and created again under its
// id (the vault's Since moves to its new start): the new t1's gateway,
// naming the same draft ids there, streams new messages of its own. Its
// seal is not taken for a repeat of the earlier t1's seal, nor its frame
// appended to the earlier t1's open stream.
func TestRemadeTenantStreamsAfresh(t *testing.T) {
	eachSkew(t, func(t *testing.T, skewed bool) {
		clk := clocktest.New(time.Now())
		var began atomic.Int64
		since := func(tenant string) time.Time {
			if us := began.Load(); tenant == "t1" && us != 0 {
				return time.UnixMicro(us)
			}
			return time.Time{}
		}
		if skewed {
			began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
		}
		e := newEnvOn(t, newFake(t), nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
		frame := func(id int, content string, final bool) contract.Result {
			t.Helper()
			b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": id, "content": content, "final": final,
				"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
			r := e.execute(t, "t1", string(b))
			if !r.Success {
				t.Fatalf("draft %d %q: %+v", id, content, r)
			}
			return r
		}
		earlierSealed := frame(1, "Hello", false).MessageID
		frame(1, "Hello.", true)
		earlierOpen := frame(2, "Hi", false).MessageID
		clk.Advance(time.Second)
		began.Store(createdAt(clk.Now(), skewed))
		clk.Advance(time.Second)
		if r := frame(2, "Hi there", false); r.MessageID == earlierOpen {
			t.Fatalf("the new t1's frame appended to the earlier t1's open stream %s", earlierOpen)
		}
		own := frame(1, "Good", false).MessageID
		if r := frame(1, "Good.", true); r.MessageID != own || own == earlierSealed {
			t.Fatalf("the new t1's seal answered %s, want its own stream %s (the earlier t1's was %s)", r.MessageID, own, earlierSealed)
		}
		texts := map[string]bool{}
		for _, m := range e.fake.Messages(chanGeneral) {
			texts[m.Text] = true
		}
		if !texts["Good."] || !texts["Hi there"] || !texts["Hello."] {
			t.Fatalf("messages %v, want the new t1's own besides the earlier t1's", texts)
		}
	})
}

// TestSealRecordOfAnEarlierReleaseCounts: a seal record an earlier
// release stored (the message's ts alone, no time it was written) still
// answers a repeated seal of its draft with that message, sending nothing,
// even for a tenant the vault dates (the record may be its own).
func TestSealRecordOfAnEarlierReleaseCounts(t *testing.T) {
	clk := clocktest.New(time.Now())
	began := clk.Now()
	clk.Advance(time.Second)
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	const ts = "1768490200.000100"
	if err := st.Capabilities().Put(context.Background(), "slack/stream/t1/"+chanGeneral+"/sealed/1", []byte(ts), clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return began
		}
		return time.Time{}
	}
	e := newEnvOn(t, newFake(t), nil, &platform.Deps{Clock: clk, Store: st, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 1, "content": "Hello.", "final": true,
		"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
	r := e.execute(t, "t1", string(b))
	if !r.Success || r.MessageID != ts {
		t.Fatalf("the repeated seal answered %+v, want the stored message %s", r, ts)
	}
	if sent := e.fake.Messages(chanGeneral); len(sent) != 0 {
		t.Fatalf("the repeated seal sent %v", sent)
	}
}

// TestNewStreamReusingASealedDraftID: the gateway restarts and numbers its
// streams from 1 again, so the next turn's stream names the draft_id of
// one sealed a moment before in the channel, by the same tenant. It is a
// new stream, of another turn (metadata.message_id): its seal stops its
// own stream with the reply's rest and answers its message; a retry of
// that seal answers the same. The seal was taken for a repeat of the
// earlier one (same draft_id, within 10 minutes) and answered the
// earlier message: the new stream was never stopped, its final text never
// posted. On one instance, and with the seal on one instance and the new
// stream, after the restart, on another sharing the store.
func TestNewStreamReusingASealedDraftID(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "one instance", true: "two instances"}[shared], func(t *testing.T) {
			fake := newFake(t)
			var a, b *env
			if shared {
				st := newSharedStore(t)
				a = newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
				b = newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i1")})
			} else {
				a = newEnvOn(t, fake, nil, nil)
				b = a
			}
			frame := func(e *env, turn, content string, final bool) contract.Result {
				t.Helper()
				raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 1, "content": content, "final": final,
					"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda, "message_id": turn}})
				r := e.execute(t, "t1", string(raw))
				if !r.Success {
					t.Fatalf("turn %s %q: %+v", turn, content, r)
				}
				return r
			}
			first := frame(a, "1768490100.000100", "Work", false).MessageID
			if r := frame(a, "1768490100.000100", "Working on it.", true); r.MessageID != first {
				t.Fatalf("the first seal answered %s, want %s", r.MessageID, first)
			}
			second := frame(b, "1768490200.000100", "Done", false).MessageID
			if second == first {
				t.Fatalf("the new stream appended to the sealed one %s", first)
			}
			if r := frame(b, "1768490200.000100", "Done, merged.", true); r.MessageID != second {
				t.Fatalf("the new stream's seal answered %s, want its own message %s (the sealed one is %s)", r.MessageID, second, first)
			}
			if r := frame(a, "1768490200.000100", "Done, merged.", true); r.MessageID != second {
				t.Fatalf("a retried seal of the new stream answered %s, want %s", r.MessageID, second)
			}
			if n := len(fake.Calls("chat.stopStream")); n != 2 {
				t.Fatalf("chat.stopStream called %d times, want once for each stream", n)
			}
			m := fake.Messages(chanGeneral)
			if len(m) != 2 || m[0].Text != "Working on it." || m[1].Text != "Done, merged." || m[0].Stream || m[1].Stream {
				t.Fatalf("messages %+v, want the two replies, both stopped", m)
			}
		})
	}
}

// TestSealRecordedWithoutATurn: seal records stored before seals kept
// their turn (a {ts, at} record, and the older ts alone) are repeated by
// a retried seal naming no turn, which answers their message without
// posting; a seal naming a turn is not their repeat (as Telegram's): it
// is sent as a reply of its own.
func TestSealRecordedWithoutATurn(t *testing.T) {
	st := newSharedStore(t)
	e := newEnvOn(t, newFake(t), nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	ctx, cancel := contextFor()
	defer cancel()
	k := streamKey{"t1", chanGeneral}
	stamped, _ := json.Marshal(map[string]any{"ts": "1768480000.000100", "at": time.Now().UnixMicro()})
	for draft, raw := range map[int64][]byte{1: stamped, 2: []byte("1768480000.000200")} {
		if err := st.Capabilities().Put(ctx, k.sealKey(draft), raw, time.Now().Add(streamTTL)); err != nil {
			t.Fatal(err)
		}
	}
	seal := func(draft int, turn string) contract.Result {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": draft, "content": "Done.", "final": true,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "message_id": turn}})
		r := e.execute(t, "t1", string(raw))
		if !r.Success {
			t.Fatalf("seal of draft %d, turn %q: %+v", draft, turn, r)
		}
		return r
	}
	if r := seal(1, ""); r.MessageID != "1768480000.000100" {
		t.Fatalf("a retried seal naming no turn answered %s, want the stamped record's message", r.MessageID)
	}
	if r := seal(2, ""); r.MessageID != "1768480000.000200" {
		t.Fatalf("a retried seal naming no turn answered %s, want the bare record's message", r.MessageID)
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 0 {
		t.Fatalf("the repeats posted %+v", m)
	}
	if r := seal(1, "1768490100.000100"); r.MessageID == "1768480000.000100" {
		t.Fatal("a seal naming a turn was taken for a repeat of a record with none")
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != "Done." {
		t.Fatalf("messages %+v, want the seal naming a turn posted", m)
	}
}

// TestNewStreamReusingAnOpenDraftID: the gateway restarts mid-stream, so
// the stream of its earlier turn stays open, and the next turn's stream
// names the same draft_id. It is a stream of its own: its first frame
// seals the open one (as a frame of another draft_id does) and starts a
// message, even when its text extends the open stream's; a first frame
// that is final posts the reply. Both were taken for frames of the open
// stream: the one appended to it, the other stopped it and answered its
// message, posting no reply.
func TestNewStreamReusingAnOpenDraftID(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run(map[bool]string{false: "frame", true: "final"}[final], func(t *testing.T) {
			e := newEnv(t, nil, nil)
			frame := func(turn, content string, final bool) contract.Result {
				t.Helper()
				raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 1, "content": content, "final": final,
					"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda, "message_id": turn}})
				r := e.execute(t, "t1", string(raw))
				if !r.Success {
					t.Fatalf("turn %s %q: %+v", turn, content, r)
				}
				return r
			}
			left := frame("1768490100.000100", "Work", false).MessageID
			own := frame("1768490200.000100", "Working fine.", final).MessageID
			if own == left {
				t.Fatalf("the new turn's frame was answered with the open stream %s of the earlier turn", left)
			}
			m := e.fake.Messages(chanGeneral)
			if len(m) != 2 || m[0].Text != "Work" || m[0].Stream || m[1].Text != "Working fine." || m[1].Stream == final {
				t.Fatalf("messages %+v, want the earlier turn's stopped as it was and the new turn's own", m)
			}
		})
	}
}

// TestDraftSealRetriedAfterA429: a seal whose chat.stopStream Slack
// answers 429 past the frame's deadline fails (rate_limited) and leaves
// the stream open: the gateway's retry stops it, with the final text.
// The retry was answered with the message as sealed before, the stream
// never stopped and its final text never posted.
func TestDraftSealRetriedAfterA429(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	frame := func(content string, final bool) contract.Result {
		b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 7, "content": content, "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
		return e.execute(t, "t1", string(b))
	}
	first := frame("Hello", false)
	if !first.Success {
		t.Fatalf("%+v", first)
	}
	e.fake.Fail429("chat.stopStream", 1, 30*time.Second) // past the frame's deadline: not waited for
	if r := frame("Hello, world.", true); r.Success || r.Code != contract.CodeRateLimited {
		t.Fatalf("seal under a 429: %+v, want it rate_limited", r)
	}
	clk.Advance(31 * time.Second) // past the Retry-After
	if r := frame("Hello, world.", true); !r.Success || r.MessageID != first.MessageID {
		t.Fatalf("retried seal %+v", r)
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != "Hello, world." || m[0].Stream {
		t.Fatalf("streamed message %+v, want it stopped with the final text", m)
	}
}

// TestPressAfterRebindDropped: t1's prompt outlives its channel's routing
// (remembered 7 days): once the channel, or its workspace, is rebound to
// t2, a press of it is dropped (prompt_not_owned), neither delivered to
// t1 nor the prompt updated with t1's choice; t1's prompt in a chat it
// still holds (its DM) is answered as before.
func TestPressAfterRebindDropped(t *testing.T) {
	e := newEnv(t, nil, nil)
	prompt := func(chat, id string) string {
		t.Helper()
		r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+chat+`","content":"Deploy?","prompt_id":"`+id+`","options":[{"id":"once","label":"Approve once"}]}`)
		if !r.Success {
			t.Fatalf("prompt %s: %+v", id, r)
		}
		return r.MessageID
	}
	press := func(chat, ts, id string) {
		t.Helper()
		body := slacktest.Press(teamA.ID, chat, userAda, ts, "", "hp1:"+id+":once", "Approve once")
		if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
			t.Fatalf("press of %s: %d %s", id, code, text)
		}
	}
	inChannel, inChannel2, inDM := prompt(chanGeneral, "p1"), prompt(chanGeneral, "p2"), prompt(dmAda, "p3")
	rebind := func(bindings ...platform.Binding) {
		t.Helper()
		if err := e.p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
	}
	rebind(platform.Binding{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, platform.Binding{Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		platform.Binding{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2"})
	press(chanGeneral, inChannel, "p1")
	e.sink.Empty(t)
	press(dmAda, inDM, "p3")
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p3" {
		t.Fatalf("the DM's press delivered to %s as %+v", d.Tenant, d.Event)
	}
	rebind(platform.Binding{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t2"}, platform.Binding{Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"})
	press(chanGeneral, inChannel2, "p2")
	e.sink.Empty(t)
	e.stop() // waits for the background prompt updates
	e.stop = func() {}
	if updates := e.fake.Calls("chat.update"); len(updates) != 1 || updates[0].Form.Get("ts") != inDM {
		t.Fatalf("prompt updates %+v, want the DM prompt's alone", updates)
	}
}

// TestStreamRecordOfANegativeLengthUnreadable: a stream record in the
// store that says a negative length was streamed (not one the connector
// writes: another writer's, or a damaged one) is unreadable, as one that
// does not parse: the frame fails retryably and a send posts as any
// other. Sliced by that length, every frame and send of the chat panicked.
func TestStreamRecordOfANegativeLengthUnreadable(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx, cancel := contextFor()
	defer cancel()
	rec := `{"draft":7,"team":"T0AAA00001","ts":"1768490000.000100","sent":-3,"digest":"00"}`
	if err := e.store.Capabilities().Put(ctx, streamKey{"t1", chanGeneral}.stateKey(), []byte(rec), e.now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, final := range []bool{false, true} {
		b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 7, "content": "Hello", "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100"}})
		if r := e.execute(t, "t1", string(b)); r.Code != contract.CodeUnavailable {
			t.Fatalf("a frame (final %v) on the record: %+v, want unavailable", final, r)
		}
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"Hello","metadata":{"thread_id":"1768490100.000100"}}`); !r.Success || r.MessageID == "" {
		t.Fatalf("a send on the record: %+v, want it posted", r)
	}
}

// TestStreamStartedOnceAcrossAReconnect: a gateway's connection drops
// while its first frame of a stream is starting it (chat.startStream) on
// one instance; it dials another and sends the next frame there, or the
// seal. That frame waits for the first to start the stream, then appends
// to it, or stops it with the rest: one message, not two. Before, it
// found no stream recorded yet and started a second message (or posted
// the seal's content as one).
func TestStreamStartedOnceAcrossAReconnect(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run("final "+strconv.FormatBool(final), func(t *testing.T) { streamStartedOnce(t, final) })
	}
}

func streamStartedOnce(t *testing.T, final bool) {
	st := newSharedStore(t)
	fake := newFake(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var waited atomic.Bool
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chat.startStream" && waited.CompareAndSwap(false, true) { // the first start waits
			started <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	clk := clocktest.New(time.Now())
	instance := func(name string, clk clock.Clock) *env {
		return newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, &platform.Deps{Store: st, Clock: clk, Cluster: newNode(t, st, name)})
	}
	a, b := instance("i0", clock.System), instance("i1", clk)
	frame := func(e *env, content string, final bool) contract.Result {
		raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 7, "content": content, "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
		return e.execute(t, "t1", string(raw))
	}
	first, next := make(chan contract.Result, 1), make(chan contract.Result, 1)
	go func() { first <- frame(a, "Hello", false) }()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first frame's chat.startStream", waitFor)
	}
	timers := clk.Pending()
	go func() { next <- frame(b, "Hello, world", final) }()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pending := make(chan error, 1)
	go func() { pending <- clk.WaitPending(ctx, timers+1) }()
	select {
	case r := <-next:
		t.Fatalf("the next frame was answered (%+v) while the first still started the stream", r)
	case err := <-pending:
		if err != nil {
			t.Fatalf("waiting for the next frame to wait for the first: %v", err)
		}
	}
	once.Do(func() { close(release) })
	var ts string
	select {
	case r := <-first:
		if !r.Success || r.MessageID == "" {
			t.Fatalf("the first frame: %+v", r)
		}
		ts = r.MessageID
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first frame", waitFor)
	}
	clk.Advance(sealPoll)
	select {
	case r := <-next:
		if !r.Success || r.MessageID != ts {
			t.Fatalf("the next frame: %+v, want it in %s", r, ts)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the next frame", waitFor)
	}
	want := map[string]int{"chat.startStream": 1, "chat.appendStream": 1, "chat.stopStream": 0, "chat.postMessage": 0}
	if final {
		want["chat.appendStream"], want["chat.stopStream"] = 0, 1
	}
	for method, n := range want {
		if got := len(fake.Calls(method)); got != n {
			t.Errorf("%d %s, want %d", got, method, n)
		}
	}
}

// sharedOnClock is two instances sharing one store, on clk (the store's
// expiries too), against fake.
func sharedOnClock(t *testing.T, fake *slacktest.Server, clk clock.Clock) (a, b *env) {
	t.Helper()
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	a = newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk, Cluster: newNode(t, st, "i0")})
	b = newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk, Cluster: newNode(t, st, "i1")})
	return a, b
}

// turnFrame is a frame of draft id in the thread of turn 1768490100.000100.
func turnFrame(t *testing.T, e *env, id int, content string, final bool) contract.Result {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": id, "content": content, "final": final,
		"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda, "message_id": "1768490100.000100"}})
	return e.execute(t, "t1", string(raw))
}

// TestStragglerBehindItsSealShowsNothing: a frame of a stream sealed
// lately (the gateway's frame reaching another instance after its seal)
// shows nothing and answers the stream's message, as Telegram's does:
// while the stream's first frame's claim holds, after it lapsed, and
// behind the chat's next stream, which it leaves open. Before, it waited
// for the first frame's claim until its deadline and failed, or, once the
// claim lapsed, started a second message (stopping the next stream first).
func TestStragglerBehindItsSealShowsNothing(t *testing.T) {
	for _, c := range []struct {
		name        string
		lapse, next bool
	}{{"within the claim", false, false}, {"after its lapse", true, false}, {"behind the next stream", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			fake := newFake(t)
			a, b := sharedOnClock(t, fake, clk)
			ts := turnFrame(t, a, 7, "Hello", false).MessageID
			if r := turnFrame(t, a, 7, "Hello, world.", true); !r.Success || r.MessageID != ts {
				t.Fatalf("the seal: %+v, want %s", r, ts)
			}
			if c.lapse {
				clk.Advance(DefaultRequestTimeout + waitFor + time.Second)
			}
			if c.next {
				if r := turnFrame(t, a, 8, "Next", false); !r.Success {
					t.Fatalf("the next stream: %+v", r)
				}
			}
			if r := turnFrame(t, b, 7, "Hello, wor", false); !r.Success || r.MessageID != ts {
				t.Fatalf("the straggler: %+v, want %s answered with nothing shown", r, ts)
			}
			want := map[string]int{"chat.startStream": 1, "chat.appendStream": 0, "chat.stopStream": 1, "chat.postMessage": 0}
			if c.next {
				want["chat.startStream"] = 2
			}
			for method, n := range want {
				if got := len(fake.Calls(method)); got != n {
					t.Errorf("%d %s, want %d", got, method, n)
				}
			}
		})
	}
}

// TestSealResentAfterItsRecordWasLost: a seal stopped its stream, but
// its record was not stored (the store failed that write alone); the
// gateway resends it to another instance, which answers the stream's
// message from the stream's record, sealed: while the seal's claim holds
// and after it lapsed. Before, the resend waited for the claim until its
// deadline and failed, or, once it lapsed, posted the content again as a
// message of its own.
func TestSealResentAfterItsRecordWasLost(t *testing.T) {
	for _, lapse := range []bool{false, true} {
		t.Run("lapsed "+strconv.FormatBool(lapse), func(t *testing.T) {
			clk := clocktest.New(time.Now())
			fake := newFake(t)
			a, b := sharedOnClock(t, fake, clk)
			ts := turnFrame(t, a, 7, "Hello", false).MessageID
			if r := turnFrame(t, a, 7, "Hello, world.", true); !r.Success || r.MessageID != ts {
				t.Fatalf("the seal: %+v, want %s", r, ts)
			}
			ctx, cancel := contextFor()
			defer cancel()
			k := streamKey{"t1", chanGeneral}
			if err := a.p.streams.state.Delete(ctx, k.sealKey(7)); err != nil {
				t.Fatal(err)
			}
			if lapse {
				clk.Advance(DefaultRequestTimeout + waitFor + time.Second)
			}
			var answered atomic.Int32
			resent := make(chan contract.Result, 1)
			go func() {
				resent <- turnFrame(t, b, 7, "Hello, world.", true)
				answered.Add(1)
			}()
			clk.Drive(t, 1, func() int { return int(answered.Load()) }, func() int { return 0 })
			if r := <-resent; !r.Success || r.MessageID != ts {
				t.Fatalf("the resent seal: %+v, want %s", r, ts)
			}
			for method, n := range map[string]int{"chat.startStream": 1, "chat.stopStream": 1, "chat.postMessage": 0} {
				if got := len(fake.Calls(method)); got != n {
					t.Errorf("%d %s, want %d", got, method, n)
				}
			}
		})
	}
}

// TestSealFailedAsItsRequestEndedIsSentAgain: a seal with nothing
// streamed whose request ended while it posted (the gateway went away)
// gives up its claims, so the gateway's resend, on another instance,
// posts the reply. Before, its claim was kept (the seal's record was
// looked for on the ended context, which failed), and the resend waited
// for it until its deadline and failed.
func TestSealFailedAsItsRequestEndedIsSentAgain(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	posting, ended := make(chan struct{}, 1), make(chan struct{})
	var held atomic.Bool
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chat.postMessage" && held.CompareAndSwap(false, true) { // the first post is held until its request ends
			posting <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-ended:
			}
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	t.Cleanup(func() { close(ended) })
	a := newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i1")})
	const seal = `{"op":"draft","chat_id":"C0GEN00001","draft_id":7,"content":"Done.","final":true,
		"metadata":{"thread_id":"1768490100.000100","message_id":"1768490100.000100"}}`
	act, err := contract.DecodeAction(json.RawMessage(seal))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan contract.Result, 1)
	go func() { first <- a.p.Execute(ctx, "t1", &act) }()
	select {
	case <-posting:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the seal's chat.postMessage", waitFor)
	}
	cancel()
	select {
	case r := <-first:
		if r.Success {
			t.Fatalf("the seal whose request ended: %+v, want it failed", r)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the seal whose request ended", waitFor)
	}
	if r := b.execute(t, "t1", seal); !r.Success || r.MessageID == "" {
		t.Fatalf("the resent seal: %+v, want it posted", r)
	}
	if m := fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != "Done." {
		t.Fatalf("messages %+v, want the reply once", m)
	}
}

// TestDraftFramesWhileTheStoreIsDown: each frame of a stream is logged when
// its claim (shared by the instances) is not taken, or its stream's record
// not read, as the store does not answer; the log says so a few times,
// then holds back, on a clock that does not move. Each frame logged a
// warning, so an outage flooded the log at the streams' frame rate.
func TestDraftFramesWhileTheStoreIsDown(t *testing.T) {
	for _, tc := range []struct{ name, warning string }{
		{"claims", "slack draft frame not claimed"},
		{"everything", "slack stream record not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &downStore{Store: newSharedStore(t)}
			e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0"), Clock: clocktest.New(time.Now())})
			st.down.Store(true)
			if tc.name == "everything" {
				_ = st.Close()
			}
			for i := range storeLogRate.Burst + 1 {
				b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": i + 1, "content": "frame",
					"metadata": map[string]any{"thread_id": "1768490100.000100"}})
				e.execute(t, "t1", string(b))
			}
			if n := strings.Count(e.logs.String(), tc.warning); n != storeLogRate.Burst {
				t.Fatalf("%d warnings logged for %d frames, want %d", n, storeLogRate.Burst+1, storeLogRate.Burst)
			}
		})
	}
}

// downStore is a store whose claims fail once down is set.
type downStore struct {
	store.Store
	down atomic.Bool
}

func (s *downStore) Claims() store.Claims { return downClaims{s.Store.Claims(), &s.down} }

type downClaims struct {
	store.Claims
	down *atomic.Bool
}

func (c downClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	if c.down.Load() {
		return false, errors.New("the store is down")
	}
	return c.Claims.Claim(ctx, key, expires)
}

// lostStreamRecords is a store that, while lose is set, stores no stream
// record (slack/stream/…): the store failed those writes alone.
type lostStreamRecords struct {
	store.Store
	lose atomic.Bool
}

func (s *lostStreamRecords) Capabilities() store.Capabilities {
	return lostStreamPuts{s.Store.Capabilities(), &s.lose}
}

type lostStreamPuts struct {
	store.Capabilities
	lose *atomic.Bool
}

func (c lostStreamPuts) Put(ctx context.Context, key string, value []byte, expires time.Time) error {
	if c.lose.Load() && strings.HasPrefix(key, "slack/stream/") {
		return errors.New("the write was lost")
	}
	return c.Capabilities.Put(ctx, key, value, expires)
}

// TestStreamWhoseRecordWasLostGoesOn: a stream's first frame started the
// stream but its record was not stored; the next frame, finding no
// stream, starts another message at once, as the stream's record lost
// promises. Before, the first frame kept its claim, so the next frame
// waited for it until its deadline and failed.
func TestStreamWhoseRecordWasLostGoesOn(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := &lostStreamRecords{Store: store.NewMemory(clk)}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, nil, &platform.Deps{Store: st, Clock: clk, Cluster: newNode(t, st, "i0")})
	st.lose.Store(true)
	if r := turnFrame(t, e, 7, "Hello", false); !r.Success {
		t.Fatalf("the first frame: %+v", r)
	}
	st.lose.Store(false)
	if r := turnFrame(t, e, 7, "Hello, world", false); !r.Success {
		t.Fatalf("the next frame: %+v, want it streamed", r)
	}
	if n := len(e.fake.Calls("chat.startStream")); n != 2 {
		t.Fatalf("%d chat.startStream, want 2 (the first stream's record was lost)", n)
	}
}

// heldStartStream is an API URL in front of fake whose first
// chat.startStream is held until release: started receives once it is.
func heldStartStream(t *testing.T, fake *slacktest.Server) (apiURL string, started <-chan struct{}, release func()) {
	t.Helper()
	return heldCall(t, fake, "chat.startStream")
}

// heldCall is heldStartStream for Web API method.
func heldCall(t *testing.T, fake *slacktest.Server, method string) (apiURL string, started <-chan struct{}, release func()) {
	t.Helper()
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	begun, released := make(chan struct{}, 1), make(chan struct{})
	var held atomic.Bool
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/"+method && held.CompareAndSwap(false, true) {
			begun <- struct{}{}
			select {
			case <-released:
			case <-r.Context().Done():
			}
		}
		forward.ServeHTTP(w, r)
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(proxy.Close)
	t.Cleanup(release) // before proxy.Close: a held call ends first
	return proxy.URL + "/", begun, release
}

// waitingFrame starts a stream on instance a (its chat.startStream held;
// its answer comes on first) and sends a copy of its first frame to
// instance b, on clk, under ctx, returning once that copy waits for a's
// claim: its answer comes on the channel.
func waitingFrame(ctx context.Context, t *testing.T) (b *env, clk *clocktest.Fake, first, answer <-chan contract.Result, release func()) {
	t.Helper()
	return waitingCopy(ctx, t, false, nil)
}

// waitingCopy is waitingFrame with the copy final (a seal) when final,
// and b's store wrapped by wrap (when not nil).
func waitingCopy(ctx context.Context, t *testing.T, final bool, wrap func(store.Store) store.Store) (b *env, clk *clocktest.Fake, first, answer <-chan contract.Result, release func()) {
	t.Helper()
	st := newSharedStore(t)
	bst := st
	if wrap != nil {
		bst = wrap(st)
	}
	fake := newFake(t)
	apiURL, started, release := heldStartStream(t, fake)
	clk = clocktest.New(time.Now())
	a := newEnvOn(t, fake, func(c *Config) { c.APIURL = apiURL }, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	b = newEnvOn(t, fake, nil, &platform.Deps{Store: bst, Clock: clk, Cluster: newNode(t, st, "i1")})
	started1 := make(chan contract.Result, 1)
	go func() { started1 <- turnFrame(t, a, 7, "Hello", false) }()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first frame's chat.startStream", waitFor)
	}
	copied := make(chan contract.Result, 1)
	go func() {
		raw, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 7, "content": "Hello", "final": final,
			"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda, "message_id": "1768490100.000100"}})
		act, _ := contract.DecodeAction(raw)
		copied <- b.p.Execute(ctx, "t1", &act)
	}()
	wctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := clk.WaitSleepers(wctx, 1); err != nil { // in its chat's frame queue, not only past its deadline's timer
		t.Fatalf("waiting for the copy to wait for the first frame's claim: %v", err)
	}
	return b, clk, started1, copied, release
}

// TestSendBehindAWaitingFrameSealsItsStream: a copy of a stream's first
// frame waits on another instance for the claim of the first, still
// starting the stream, when the gateway's final send of the turn (sent
// without awaiting the frame's answer) reaches that instance. The send
// waits for the frame and, once the stream is recorded, seals it: one
// reply. Before, the send went ahead of the waiting frame, found no
// stream and was posted beside it, a second copy of the reply.
func TestSendBehindAWaitingFrameSealsItsStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	b, clk, first, copied, release := waitingFrame(ctx, t)
	act, err := contract.DecodeAction(json.RawMessage(`{"op":"send","chat_id":"` + chanGeneral + `","content":"Hello, world.",
		"metadata":{"thread_id":"1768490100.000100","user_id":"` + userAda + `","message_id":"1768490100.000100"}}`))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan contract.Result, 1)
	go func() { sent <- b.p.Execute(ctx, "t1", &act) }()
	select { // bounded: the send must not be answered while the stream is starting
	case r := <-sent:
		t.Fatalf("the send answered %+v while the frame before it waited for a claim", r)
	case <-time.After(sealPoll):
	}
	release()
	ts := (<-first).MessageID
	clk.Advance(sealPoll) // the copy tries again
	if r1, r2 := <-copied, <-sent; !r1.Success || r1.MessageID != ts || !r2.Success || r2.MessageID != ts {
		t.Fatalf("the copy %+v and the send %+v, want both the stream %s", r1, r2, ts)
	}
	if n, m := len(b.fake.Calls("chat.stopStream")), len(b.fake.Calls("chat.postMessage")); n != 1 || m != 0 {
		t.Fatalf("%d chat.stopStream and %d chat.postMessage, want the stream sealed and nothing posted", n, m)
	}
}

// TestFrameThatWaitedOutAClaimIsToldToRetry: a copy of a stream's first
// frame waits for the claim of the first, still starting the stream,
// until its deadline: it fails unavailable saying another copy is in
// progress, retry. Before, it said Slack gave no answer before the
// deadline, though Slack was never asked.
func TestFrameThatWaitedOutAClaimIsToldToRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _, _, answer, _ := waitingFrame(ctx, t)
	select {
	case r := <-answer:
		if r.Success || r.Code != contract.CodeUnavailable || !strings.Contains(r.Error, "in progress; retry") {
			t.Fatalf("the copy that waited out the claim: %+v", r)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the copy's answer", waitFor)
	}
}

// TestSendOfAnotherTurnDoesNotSealTheStream: a send answering another
// turn than the chat's open stream, its content beginning with what was
// streamed, is posted as a message of its own, and the stream stays
// open. Before, it sealed the stream with its content and answered the
// stream's message, so the reply to the other turn was never posted.
func TestSendOfAnotherTurnDoesNotSealTheStream(t *testing.T) {
	e := newEnv(t, nil, nil)
	ts := turnFrame(t, e, 7, "Hello", false).MessageID
	r := e.execute(t, "t1", `{"op":"send","chat_id":"`+chanGeneral+`","content":"Hello to you too.",
		"metadata":{"thread_id":"1768490100.000100","message_id":"1768490199.000100"}}`)
	if !r.Success || r.MessageID == ts {
		t.Fatalf("the send of another turn: %+v, want a message of its own (the stream is %s)", r, ts)
	}
	if n, m := len(e.fake.Calls("chat.stopStream")), len(e.fake.Calls("chat.postMessage")); n != 0 || m != 1 {
		t.Fatalf("%d chat.stopStream and %d chat.postMessage, want the stream open and one post", n, m)
	}
}

// TestFramesBehindAWaitingFrameKeepTheirOrder: a copy of a stream's first
// frame waits on another instance for the claim of the first; the next
// frame reaches that instance meanwhile. Once the first is recorded both
// go on in order: the copy answers the stream, the next frame appends to
// it. A frame waiting outside its chat's turn must not let a later frame
// of the chat overtake it (the copy, come second, would seal the stream
// as not extending it).
func TestFramesBehindAWaitingFrameKeepTheirOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	b, clk, first, copied, release := waitingFrame(ctx, t)
	next := make(chan contract.Result, 1)
	go func() { next <- turnFrame(t, b, 7, "Hello, world", false) }()
	release()
	ts := (<-first).MessageID
	clk.Advance(sealPoll) // the copy tries again
	if r1, r2 := <-copied, <-next; !r1.Success || r1.MessageID != ts || !r2.Success || r2.MessageID != ts {
		t.Fatalf("the copy %+v and the next frame %+v, want both in %s", r1, r2, ts)
	}
	if n := len(b.fake.Calls("chat.stopStream")); n != 0 {
		t.Fatalf("%d chat.stopStream, want the stream open", n)
	}
}

// TestOpeningClaimReleasedAcrossADeclaration: a stream's first frame is
// starting the stream (its chat.startStream held) when the operator
// declares its stored tenant in the YAML (its creation becomes zero); the
// start fails. The declaration is taken back, and the gateway's resend of
// the frame starts the stream at once. The failed frame released its
// claim under a key named by the creation at its release, not the one it
// took, so the claim stayed until it lapsed and the resend waited for it
// until its deadline.
func TestOpeningClaimReleasedAcrossADeclaration(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	apiURL, started, release := heldStartStream(t, fake)
	stored := time.Now().Add(-time.Hour).UnixMicro()
	var began atomic.Int64
	began.Store(stored)
	since := func(string) time.Time {
		if us := began.Load(); us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	e := newEnvOn(t, fake, func(c *Config) { c.APIURL = apiURL }, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0"),
		Vault: vault.NewMemory(vault.Config{Since: since})})
	first := make(chan contract.Result, 1)
	go func() { first <- turnFrame(t, e, 7, "Hello", false) }()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first frame's chat.startStream", waitFor)
	}
	began.Store(0) // declared in the YAML
	fake.Fail404("chat.startStream", 1)
	release()
	if r := <-first; r.Success {
		t.Fatalf("the frame whose start failed: %+v", r)
	}
	began.Store(stored) // the declaration taken back
	act, err := contract.DecodeAction(json.RawMessage(`{"op":"draft","chat_id":"` + chanGeneral + `","draft_id":7,"content":"Hello",
		"metadata":{"thread_id":"1768490100.000100","user_id":"` + userAda + `","message_id":"1768490100.000100"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if r := e.p.Execute(ctx, "t1", &act); !r.Success {
		t.Fatalf("the resent frame: %+v, want the stream started", r)
	}
}

// TestWaitingFrameAsksLittleOfTheStore: a copy of a stream's first frame,
// or of its seal, that waits on another instance for the first's claim
// asks the store at most three things each time it looks again (the claim
// and the records the first would leave). Before, each look ran the whole
// frame again: a seal took its own claim and released it, six store
// round trips every 250 ms for as long as it waited.
func TestWaitingFrameAsksLittleOfTheStore(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run("final "+strconv.FormatBool(final), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			var tally *tallyStore
			b, clk, first, copied, release := waitingCopy(ctx, t, final, func(st store.Store) store.Store {
				tally = &tallyStore{Store: st}
				return tally
			})
			const looks = 4
			tally.calls.Store(0)
			for range looks {
				clk.Advance(sealPoll)
				if err := clk.WaitSleepers(ctx, 1); err != nil {
					t.Fatalf("waiting for the copy to wait again: %v", err)
				}
			}
			if n := tally.calls.Load(); n > 3*looks {
				t.Errorf("%d store calls in %d looks, want at most %d", n, looks, 3*looks)
			}
			release()
			ts := (<-first).MessageID
			clk.Advance(sealPoll)
			if r := <-copied; !r.Success || r.MessageID != ts {
				t.Fatalf("the copy: %+v, want %s", r, ts)
			}
			if n := len(b.fake.Calls("chat.startStream")); n != 1 {
				t.Fatalf("%d chat.startStream, want 1", n)
			}
		})
	}
}

// tallyStore counts the calls on its stores' draft stream keys.
type tallyStore struct {
	store.Store
	calls atomic.Int64
}

func (s *tallyStore) Capabilities() store.Capabilities { return tallyCaps{s.Store.Capabilities(), s} }
func (s *tallyStore) Claims() store.Claims             { return tallyClaims{s.Store.Claims(), s} }

func (s *tallyStore) count(key string) {
	for _, prefix := range []string{"slack/stream/", "slack/sealing/", "slack/opening/"} {
		if strings.HasPrefix(key, prefix) {
			s.calls.Add(1)
		}
	}
}

type tallyCaps struct {
	store.Capabilities
	s *tallyStore
}

func (c tallyCaps) Get(ctx context.Context, key string) ([]byte, bool, error) {
	c.s.count(key)
	return c.Capabilities.Get(ctx, key)
}

func (c tallyCaps) Put(ctx context.Context, key string, value []byte, expires time.Time) error {
	c.s.count(key)
	return c.Capabilities.Put(ctx, key, value, expires)
}

type tallyClaims struct {
	store.Claims
	s *tallyStore
}

func (c tallyClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	c.s.count(key)
	return c.Claims.Claim(ctx, key, expires)
}

func (c tallyClaims) Release(ctx context.Context, key string, expires time.Time) error {
	c.s.count(key)
	return c.Claims.Release(ctx, key, expires)
}

// TestWaitingSealAsksLittleOfTheStore: a copy of a stream's seal that
// waits on another instance for the seal's claim (its chat.stopStream
// under way) asks the store two things each time it looks again: the
// claim and the seal's record, then answers the seal's message. Before,
// it read the stream's record too, which it cannot answer from while
// that claim holds (the frame takes it first).
func TestWaitingSealAsksLittleOfTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st := newSharedStore(t)
	tally := &tallyStore{Store: st}
	fake := newFake(t)
	apiURL, stopping, release := heldCall(t, fake, "chat.stopStream")
	clk := clocktest.New(time.Now())
	a := newEnvOn(t, fake, func(c *Config) { c.APIURL = apiURL }, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: tally, Clock: clk, Cluster: newNode(t, st, "i1")})
	if r := turnFrame(t, a, 7, "Hello", false); !r.Success {
		t.Fatalf("the first frame: %+v", r)
	}
	sealed := make(chan contract.Result, 1)
	go func() { sealed <- turnFrame(t, a, 7, "Hello, world", true) }()
	select {
	case <-stopping:
	case <-ctx.Done():
		t.Fatalf("timed out after %v waiting for the seal's chat.stopStream", waitFor)
	}
	copied := make(chan contract.Result, 1)
	go func() { copied <- turnFrame(t, b, 7, "Hello, world", true) }()
	if err := clk.WaitSleepers(ctx, 1); err != nil {
		t.Fatalf("waiting for the copy to wait for the seal's claim: %v", err)
	}
	const looks = 4
	tally.calls.Store(0)
	for range looks {
		clk.Advance(sealPoll)
		if err := clk.WaitSleepers(ctx, 1); err != nil {
			t.Fatalf("waiting for the copy to wait again: %v", err)
		}
	}
	if n := tally.calls.Load(); n > 2*looks {
		t.Errorf("%d store calls in %d looks, want at most %d", n, looks, 2*looks)
	}
	release()
	ts := (<-sealed).MessageID
	clk.Advance(sealPoll)
	if r := <-copied; !r.Success || r.MessageID != ts {
		t.Fatalf("the copy: %+v, want %s", r, ts)
	}
	if n := len(fake.Calls("chat.stopStream")); n != 1 {
		t.Fatalf("%d chat.stopStream, want 1", n)
	}
}
