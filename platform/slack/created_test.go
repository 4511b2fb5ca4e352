package slack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/vault"
)

// TestPromptOfAnOpThatOutlivedItsTenant: t1's prompt reaches Slack, and
// t1 is deleted and made again under its id (the vault's Since moves)
// before the op returns. Its record keeps the creation the op was
// authorized under, so a press of it is dropped as an earlier tenant's
// prompt. Before, the record took the new creation, read as the op
// returned, and the press went to the new t1 as its prompt's answer.
func TestPromptOfAnOpThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Now()) // requests are signed at the time of day
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
	fake := newFake(t)
	var armed atomic.Int64 // the channel's messages before the prompt; -1: not yet
	armed.Store(-1)
	since := func(tenant string) time.Time {
		if n := armed.Load(); tenant == "t1" && n >= 0 && int64(len(fake.Messages(chanGeneral))) > n {
			return again // made again once the prompt reached Slack
		}
		return first
	}
	e := newEnvOn(t, fake, nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	armed.Store(int64(len(fake.Messages(chanGeneral))))
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+chanGeneral+`","content":"Deploy?","prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("the earlier t1's prompt: %+v", r)
	}
	clk.Advance(2 * time.Second)
	body := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("press: %d %s", code, text)
	}
	e.sink.Empty(t)
}

// TestDraftOfAnOpThatOutlivedItsTenant: t1's draft frame starts a stream
// (or its seal, nothing streamed, posts the reply), and t1 is deleted and
// made again under its id before the op returns. The stream's (or seal's)
// record keeps the creation the frame was authorized under, so the new
// t1's frame under the same draft_id starts a stream of its own (its seal
// posts a reply of its own). Before, the record took the new creation,
// read as the op returned: the new t1's frame appended to the earlier
// t1's stream message, and its seal was answered with the earlier reply.
func TestDraftOfAnOpThatOutlivedItsTenant(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run(fmt.Sprintf("final %v", final), func(t *testing.T) {
			clk := clocktest.New(time.Now())
			first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
			fake := newFake(t)
			var armed atomic.Int64 // the channel's messages before the frame; -1: not yet
			armed.Store(-1)
			since := func(tenant string) time.Time {
				if n := armed.Load(); tenant == "t1" && n >= 0 && int64(len(fake.Messages(chanGeneral))) > n {
					return again // made again once the frame reached Slack
				}
				return first
			}
			e := newEnvOn(t, fake, nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
			frame := func(content string) contract.Result {
				b, _ := json.Marshal(map[string]any{"op": "draft", "chat_id": chanGeneral, "draft_id": 7, "content": content, "final": final,
					"metadata": map[string]any{"thread_id": "1768490100.000100", "user_id": userAda}})
				return e.execute(t, "t1", string(b))
			}
			armed.Store(int64(len(fake.Messages(chanGeneral))))
			earlier := frame("Hello")
			if !earlier.Success || earlier.MessageID == "" {
				t.Fatalf("the earlier t1's frame: %+v", earlier)
			}
			clk.Advance(2 * time.Second)
			if r := frame("Hello, again"); !r.Success || r.MessageID == earlier.MessageID {
				t.Fatalf("the new t1's frame %+v was the earlier t1's %s", r, earlier.MessageID)
			}
			if n := len(fake.Calls("chat.appendStream")); n != 0 {
				t.Fatalf("the new t1's frame appended to the earlier t1's stream (%d appends)", n)
			}
		})
	}
}

// TestThreadMarkerOfAnOpThatOutlivedItsTenant: t1's send into a thread
// reaches Slack, and t1 is deleted and made again under its id before the
// op returns. The thread's marker keeps the creation the send was
// authorized under, so an unmentioned reply there does not wake the bot
// for the new t1. Before, the marker took the new creation, read as the
// op returned, and the reply went to the new t1.
func TestThreadMarkerOfAnOpThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Now()) // requests are signed at the time of day
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
	fake := newFake(t)
	var armed atomic.Int64 // the channel's messages before the send; -1: not yet
	armed.Store(-1)
	since := func(tenant string) time.Time {
		if n := armed.Load(); tenant == "t1" && n >= 0 && int64(len(fake.Messages(chanGeneral))) > n {
			return again // made again once the send reached Slack
		}
		return first
	}
	drops := &platformtest.LastDrop{}
	e := newEnvOn(t, fake, nil, &platform.Deps{Clock: clk, Metrics: drops, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	const root = "1768490100.000100"
	armed.Store(int64(len(fake.Messages(chanGeneral))))
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"looking","metadata":{"thread_id":"`+root+`"}}`); !r.Success {
		t.Fatalf("the earlier t1's send: %+v", r)
	}
	clk.Advance(2 * time.Second)
	drops.Take()
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490110.000100", root, "thanks"), http.StatusOK)
	e.settled(t)
	e.sink.Empty(t)
	if r := drops.Take(); r != dropMentionRequired {
		t.Fatalf("the reply in the earlier t1's thread: drop %q, want %s", r, dropMentionRequired)
	}
}

// TestPressOfAPromptWhoseTenantIsMadeAgainMeanwhile: a press of t1's
// prompt is checked against the prompt's record (t1's creation then), and
// t1 is deleted and made again under its id right after (the vault's
// Since moves once the record was judged). The press is delivered under
// the creation the record was judged by, which the relay refuses for the
// new t1. Before, the press read the creation again after the check and
// went to the new t1 as its prompt's answer.
func TestPressOfAPromptWhoseTenantIsMadeAgainMeanwhile(t *testing.T) {
	clk := clocktest.New(time.Now()) // requests are signed at the time of day
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
	var reads atomic.Int64 // t1's creation reads since the press came; -1: not yet
	reads.Store(-1)
	since := func(tenant string) time.Time {
		if tenant == "t1" && reads.Load() >= 0 && reads.Add(1) > 1 {
			return again // made again once the record was judged (the press's first read)
		}
		return first
	}
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+chanGeneral+`","content":"Deploy?","prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	reads.Store(0)
	body := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("press: %d %s", code, text)
	}
	if d := e.sink.Next(t); d.Created.UnixMicro() != first.UnixMicro() {
		t.Fatalf("the press of the earlier t1's prompt delivered under creation %v, want %v (the record's)", d.Created, first)
	}
}

// TestTenantMadeAgainStartsWithAnEmptyIntakeCharge: t1's slash commands,
// behind its message whose file stalls, fill t1's part of the intake
// (the next is answered busy); t1 is deleted and made again under its id
// (the vault's Since moves), and the new t1's command is taken: the
// entries held are charged to the tenant as created. Before, the new t1
// was charged the earlier one's entries until they were handled, and its
// commands were answered busy.
func TestTenantMadeAgainStartsWithAnEmptyIntakeCharge(t *testing.T) {
	clk := clocktest.New(time.Now()) // requests are signed at the time of day
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(-time.Minute)
	var remade atomic.Bool
	since := func(string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	command := func(n int) string {
		code, body := e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/status", fmt.Sprint(n), ""))
		if code != http.StatusOK {
			t.Fatalf("t1's slash command %d answered %d %q, want 200", n, code, body)
		}
		return body
	}
	n := 1
	for ; n <= intakeMaxHeld && strings.Contains(command(n), "Running"); n++ {
	}
	if n == 1 || n > intakeMaxHeld {
		t.Fatalf("t1's slash commands: %d taken, want its part of the intake and then busy", n-1)
	}
	remade.Store(true)
	if body := command(n + 1); !strings.Contains(body, "Running") {
		t.Fatalf("the new t1's slash command answered %q, want it taken", body)
	}
}

// TestSweptEntryChargedToItsTenantAsStored: an entry the earlier t1
// stored (an instance that died) is swept after t1 was deleted and made
// again under its id: it is charged to the earlier t1, as stored, and the
// new t1 starts with none of it. Before, a sweep charged each entry to
// its tenant as created at the sweep, so the new t1 was charged the
// earlier one's entries until they were handled.
func TestSweptEntryChargedToItsTenantAsStored(t *testing.T) {
	clk := clocktest.New(time.Now())
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(-time.Minute)
	var remade atomic.Bool
	since := func(string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	stored := intakeRecord{Route: routeInteractions, Body: []byte("payload=%7B%7D"), Received: clk.Now().UnixNano(), Tenant: "t1"}
	value := mustJSON(t, map[string]any{"route": stored.Route, "body": stored.Body, "received": stored.Received, "tenant": "t1", "created": first.UnixNano()})
	key := intakeKey(teamA.ID+"/"+dmAda, stored)
	if _, err := e.p.deps.Store.Registry().Put(t.Context(), intakeNamespace, key, value); err != nil {
		t.Fatal(err)
	}
	remade.Store(true)
	claimed := e.p.claimUnheld(t.Context()) // a sweep's, the clock not moved to Run's next
	if len(claimed) != 1 {
		t.Fatalf("the sweep claimed %d entries, want the earlier t1's", len(claimed))
	}
	defer func() {
		e.p.intake.unreserve(claimed[0].charge)
		e.p.releaseIntake(key, claimed[0].until)
	}()
	now := e.p.chargeOf("t1")
	e.p.intake.mu.Lock()
	n := e.p.intake.charged[now]
	e.p.intake.mu.Unlock()
	if n != 0 {
		t.Fatalf("the new t1 is charged %d entries, want none (the swept entry is the earlier t1's)", n)
	}
}
