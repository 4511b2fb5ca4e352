package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/media"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"

	"github.com/redis/go-redis/v9"
)

// fileMessage is a message of Ada in channel with the one PNG file id the
// fake serves at url.
func fileMessage(channel, ts, id, url string) map[string]any {
	ev := slacktest.MessageEvent(teamA.ID, channel, userAda, ts, "", "<@"+teamA.BotUser+"> a shot")
	ev["subtype"] = "file_share"
	ev["files"] = []any{map[string]any{"id": id, "name": id + ".png", "mimetype": "image/png", "size": 10, "url_private": url}}
	return ev
}

// postAsync posts the signed body to path and answers its status on the
// channel returned.
func (e *env) postAsync(t *testing.T, path, contentType string, body []byte) <-chan int {
	codes := make(chan int, 1)
	req := slacktest.SignedRequest(e.srv.URL+path, testSecret, e.now(), contentType, body)
	go func() {
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}()
	return codes
}

// answered waits for the status on codes and wants 200; what names the
// request.
func answered(t *testing.T, codes <-chan int, what string) {
	t.Helper()
	select {
	case code := <-codes:
		if code != http.StatusOK {
			t.Fatalf("%s answered %d, want 200", what, code)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the answer to %s", waitFor, what)
	}
}

// started waits for a stalled file's download to start.
func waitStarted(t *testing.T, started <-chan string, what string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the download of %s", waitFor, what)
	}
}

// settled waits until the intake entries this instance holds are handled
// (delivered, dropped or expired): each is held from before its 200.
func (e *env) settled(t *testing.T) {
	t.Helper()
	platformtest.WaitUntil(t, "the intake entries handled", func() bool { pending, _ := e.p.IntakeStats(); return pending == 0 })
}

// TestStalledFileAnsweredFirst: a message whose file stalls is answered
// 200 at once (its request stored in the intake); a later message and a
// slash command of its chat are answered 200 too, and delivered after it,
// in order; another chat's message is delivered meanwhile.
func TestStalledFileAnsweredFirst(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // a failed test's download ends
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "", "and then"), http.StatusOK)
	answered(t, e.postAsync(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/status", "", "")), "the slash command")
	e.event(t, teamB, "Ev3", slacktest.MessageEvent(teamB.ID, chanAcme, userBob, "1768490100.000300", "", "<@"+teamB.BotUser+"> elsewhere"), http.StatusOK)
	if d := e.sink.Next(t); !strings.Contains(d.Event.Text, "elsewhere") {
		t.Fatalf("first delivery %q, want the other chat's message", d.Event.Text)
	}
	e.sink.Empty(t)
	clk.Advance(mediaDownloadTimeout)
	for i, want := range []string{"F0SLOW0001.png could not be fetched", "and then", "/status"} {
		if d := e.sink.Next(t); !strings.Contains(d.Event.Text, want) {
			t.Fatalf("delivery %d %q, want it to hold %q", i, d.Event.Text, want)
		}
	}
	intakeEmpty(t, e.store)
}

// TestRoutedUnderTheCreationItWasRoutedTo: t1 is deleted and created
// again while a message routed to the earlier t1 waits for its file: it
// is delivered as routed under the earlier t1's creation (which the relay
// drops), not the new t1's.
func TestRoutedUnderTheCreationItWasRoutedTo(t *testing.T) {
	clk := clocktest.New(time.Now())
	earlier, again := clk.Now().Add(-2*time.Hour), clk.Now().Add(-time.Hour)
	var created atomic.Pointer[time.Time]
	created.Store(&earlier)
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return *created.Load()
		}
		return time.Time{}
	}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
	started := make(chan string, 1)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // a failed test's download ends
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	created.Store(&again)
	clk.Advance(mediaDownloadTimeout)
	if d := e.sink.Next(t); !d.Created.Equal(earlier) {
		t.Fatalf("delivered as routed under t1's creation %v, want %v (the earlier t1's, it was routed to)", d.Created, earlier)
	}
}

// openEmbedded opens the embedded store in dir on clk.
func openEmbedded(t *testing.T, dir string, clk *clocktest.Fake) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestIntakeResumesAfterRestart: an instance stopped while it fetches a
// message's file keeps the entry; the next one, on the same embedded
// store, delivers the message once, with its file, and a Slack retry of it
// is answered 200 without a second delivery.
func TestIntakeResumesAfterRestart(t *testing.T) {
	clk := clocktest.New(time.Now())
	dir := t.TempDir()
	ms := newMediaStore(t)
	fake := newFake(t)
	st := openEmbedded(t, dir, clk)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0"), Media: ms, Clock: clk})
	started := make(chan string, 4)
	url := fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))
	answered(t, a.postAsync(t, EventsPath, "application/json", body), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	a.stop()
	a.stop = func() {}
	if n := a.sink.Taken(); n != 0 {
		t.Fatalf("the stopped instance delivered %d events, want none (its file was not fetched)", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	fake.AddFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", png) // it answers now
	st = openEmbedded(t, dir, clk)
	t.Cleanup(func() { _ = st.Close() })
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i1"), Media: ms, Clock: clk})
	d := b.sink.Next(t)
	if len(d.Event.Media) != 1 || d.Event.Media[0].Size != int64(len(png)) {
		t.Fatalf("resumed delivery %+v, want it with its file", d.Event)
	}
	intakeEmpty(t, st)
	platformtest.WaitUntil(t, "no intake entry held", func() bool { pending, _ := b.p.IntakeStats(); return pending == 0 })
	if _, resumed := b.p.IntakeStats(); resumed != 1 {
		t.Fatalf("%d intake entries resumed, want 1", resumed)
	}
	req := slacktest.SignedRequest(b.srv.URL+EventsPath, testSecret, b.now(), "application/json", body)
	req.Header.Set("X-Slack-Retry-Num", "1")
	if code, _ := b.do(t, req); code != http.StatusOK {
		t.Fatalf("the retry answered %d, want 200", code)
	}
	b.stop()
	b.stop = func() {}
	if n := b.sink.Taken(); n != 1 {
		t.Fatalf("delivered %d times, want once", n)
	}
	intakeEmpty(t, st)
}

// TestIntakeTakenOverOnRedis: of two instances on one Redis, the entry of
// one stopped while it fetched the file is taken by the other at its next
// sweep, and an entry a killed instance holds (its claim unreleased) once
// the claim expires; each is delivered once, with its file.
func TestIntakeTakenOverOnRedis(t *testing.T) {
	clk := clocktest.New(time.Now())
	srv := redistest.Start(t, redistest.Options{})
	open := func() store.Store {
		st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "t:", Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	fake := newFake(t)
	ms := newMediaStore(t)
	sa, sb := open(), open()
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: sa, Cluster: newNode(t, sa, "i0"), Media: ms, Clock: clk})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: sb, Cluster: newNode(t, sb, "i1"), Media: ms, Clock: clk})
	started := make(chan string, 4)
	slow := fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, a.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", slow))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	a.stop()
	a.stop = func() {}
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	fake.AddFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", png)
	clk.Advance(intakeSweepEvery)
	if d := b.sink.Next(t); len(d.Event.Media) != 1 || d.Event.Source.ChatID != dmAda {
		t.Fatalf("taken-over delivery %+v, want it with its file", d.Event)
	}

	// A killed instance's entry: stored and claimed, never released.
	killed := fileMessage(chanGeneral, "1768490100.000200", "F0KILL0001", fake.AddFile(teamA.ID, "F0KILL0001", "F0KILL0001.png", "image/png", png))
	rec := intakeRecord{Route: routeEvents, Body: slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev2", killed), Received: clk.Now().UnixNano()}
	key := intakeKey(teamA.ID+"/"+chanGeneral, rec)
	ctx, cancel := contextFor()
	defer cancel()
	if ok, err := sa.Claims().Claim(ctx, intakeClaim(key), clk.Now().Add(intakeClaimTTL)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if ok, err := sa.Registry().CompareAndSwap(ctx, intakeNamespace, key, nil, mustJSON(t, rec)); err != nil || !ok {
		t.Fatalf("store the entry: %v %v", ok, err)
	}
	clk.Advance(intakeSweepEvery)
	b.p.sweepIntake(ctx, nil) // a sweep that surely ran: the claim holds, the entry is not taken
	// Read under queueMu, under which a sweep (the clock's tick may have
	// started one) takes the entries it claimed.
	b.p.intake.queueMu.Lock()
	taken := slices.Contains(b.p.intake.keys(), key)
	b.p.intake.queueMu.Unlock()
	if taken {
		t.Fatal("the killed instance's entry was taken while its claim holds")
	}
	b.sink.Empty(t)
	// Redis counts a claim's TTL by its own clock: the claim runs out as
	// the server's expiry would end it, its key removed.
	if n, err := srv.Client(t).Del(ctx, "t:claim:"+intakeClaim(key)).Result(); err != nil || n != 1 {
		t.Fatalf("ending the killed instance's claim: %d removed, %v; want 1", n, err)
	}
	clk.Advance(intakeClaimTTL)
	d := b.sink.Next(t)
	if len(d.Event.Media) != 1 || d.Event.Source.ChatID != chanGeneral {
		t.Fatalf("taken-over delivery %+v, want the killed instance's with its file", d.Event)
	}
	intakeEmpty(t, sb)
	b.sink.Empty(t)
	if n := a.sink.Taken(); n != 0 {
		t.Fatalf("the stopped instance delivered %d events", n)
	}
}

// mustJSON is v in JSON.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// intakeEmpty waits until st's intake holds no entry (each is deleted once
// handled, its dedupe marker set).
func intakeEmpty(t *testing.T, st store.Store) {
	t.Helper()
	platformtest.WaitUntil(t, "the intake to empty", func() bool {
		entries, _, err := st.Registry().List(context.Background(), intakeNamespace)
		return err == nil && len(entries) == 0
	})
}

// drops counts the dropped events by reason.
type drops struct {
	platform.NopMetrics
	mu  sync.Mutex
	got map[string]int
}

// Dropped implements platform.Metrics.
func (d *drops) Dropped(_, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got[reason]++
}

// count is how many were dropped for reason.
func (d *drops) count(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got[reason]
}

// TestIntakeDeletesUnreadableEntries: a stored entry whose value cannot be
// parsed, or whose key names no chat, is deleted at the sweep that finds
// it and counted dropped (malformed), not skipped at every sweep.
func TestIntakeDeletesUnreadableEntries(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	for key, value := range map[string]string{
		teamA.ID + "/" + dmAda + "/00000000000000000001/0011223344556677": "{not json",
		"nochat": `{"route":"events","body":"e30=","received":1}`,
	} {
		if _, err := st.Registry().Put(t.Context(), intakeNamespace, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	m := &drops{got: map[string]int{}}
	e := newEnv(t, nil, &platform.Deps{Store: st, Metrics: m})
	intakeEmpty(t, st)
	if n := m.count(dropMalformed); n != 2 {
		t.Fatalf("%d entries dropped malformed, want 2", n)
	}
	if n := e.sink.Taken(); n != 0 {
		t.Fatalf("%d unreadable entries delivered, want none", n)
	}
}

// listFails is a store whose Registry's List fails while fail is set.
type listFails struct {
	store.Store
	fail *atomic.Bool
}

// Registry implements store.Store.
func (s listFails) Registry() store.Registry { return failingList{s.Store.Registry(), s.fail} }

// failingList is a Registry whose List fails while fail is set.
type failingList struct {
	store.Registry
	fail *atomic.Bool
}

// List implements store.Registry.
func (r failingList) List(ctx context.Context, namespace string) ([]store.Entry, uint64, error) {
	if r.fail.Load() {
		return nil, 0, errors.New("registry unavailable")
	}
	return r.Registry.List(ctx, namespace)
}

// TestIntakeRetriedOnOneInstance: on a single instance (no cluster), an
// entry its start could not list (the store failing) is resumed at a
// later sweep, intakeSweepEvery on, not left until the next restart.
func TestIntakeRetriedOnOneInstance(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(nil)
	t.Cleanup(func() { _ = mem.Close() })
	rec := intakeRecord{
		Route:    routeEvents,
		Body:     slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "left behind")),
		Received: clk.Now().UnixNano(),
	}
	value, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Registry().Put(t.Context(), intakeNamespace, intakeKey(teamA.ID+"/"+dmAda, rec), value); err != nil {
		t.Fatal(err)
	}
	fail := &atomic.Bool{}
	fail.Store(true)
	e := newEnv(t, nil, &platform.Deps{Store: listFails{mem, fail}, Clock: clk})
	if n := e.sink.Taken(); n != 0 {
		t.Fatalf("%d delivered while the intake could not be listed, want none", n)
	}
	fail.Store(false)
	clk.Advance(intakeSweepEvery)
	if d := e.sink.Next(t); d.Event.Text != "left behind" {
		t.Fatalf("resumed %+v, want the stored message", d.Event)
	}
	intakeEmpty(t, mem)
}

// TestIntakeFailingDeliveryBounded: an intake entry whose delivery the
// relay keeps refusing holds its chat's turn for intakeRetryFor at most,
// tried again with backoff on the platform's clock, then is dropped
// (intake_expired); the chat's next message, behind it, is delivered
// then. It held the chat for dedupe_window (an hour by default).
func TestIntakeFailingDeliveryBounded(t *testing.T) {
	clk := clocktest.New(time.Now())
	drops := &platformtest.LastDrop{}
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Metrics: drops})
	e.sink.Check = func(d platform.Delivery) error {
		if strings.Contains(d.Event.Text, "refused") {
			return errors.New("the relay refuses it")
		}
		return nil
	}
	const root = "1768490100.000100"
	start := clk.Now()
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", root, "refused"), http.StatusOK)
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000300", "", "behind it"), http.StatusOK)
	clk.Drive(t, 1, func() int { return int(e.sink.Taken()) }, func() int { return 0 })
	if took := clk.Now().Sub(start); took < intakeRetryFor || took > intakeRetryFor+intakeBackoffMax {
		t.Fatalf("the next message delivered %v after, want the refused one tried for %v, then dropped", took, intakeRetryFor)
	}
	if d := e.sink.Next(t); d.Event.Text != "behind it" {
		t.Fatalf("delivered %q, want the message behind the refused one", d.Event.Text)
	}
	if n := e.sink.Calls(); n < 3 {
		t.Fatalf("%d deliveries offered, want the refused one tried again", n)
	}
	e.settled(t)
	if r := drops.Take(); r != dropIntakeExpired {
		t.Fatalf("last drop %q, want %s", r, dropIntakeExpired)
	}
	intakeEmpty(t, e.store)
}

// TestIntakeDeliveredBeforeKillNotDeliveredAgain: an instance killed after
// the relay stored a thread reply's delivery (in the store's ledger) and
// before it deleted the reply's intake entry leaves both; the next one, on
// the same store, deletes that entry without delivering it again, and
// delivers the reply queued behind it, once.
func TestIntakeDeliveredBeforeKillNotDeliveredAgain(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	// The relay's part: the delivery stored in the ledger, as relay/hub.go
	// stores it; then the instance dies before Deliver returns.
	stored := make(chan struct{})
	var once sync.Once
	a.sink.Check = func(d platform.Delivery) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return errors.New("the instance is dying")
		}
		_, err := st.Ledger().Append(context.Background(), d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}})
		close(stored)
		if err != nil {
			return err
		}
		return errors.New("killed after the ledger's commit")
	}
	const thread = "1768490000.000100"
	for i, text := range []string{"first reply", "second reply"} {
		ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, sprintf("1768490100.00020%d", i), thread, text)
		answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, sprintf("EvT%d", i), ev)), text)
		clk.Advance(time.Millisecond) // entries of one chat are ordered by when they were received
	}
	select {
	case <-stored:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first reply's delivery", waitFor)
	}
	a.stop() // the backoff after the "failed" delivery waits on clk: nothing more is delivered
	a.stop = func() {}
	if n := a.sink.Taken(); n != 0 {
		t.Fatalf("the killed instance's sink took %d deliveries, want none", n)
	}
	if entries, _, err := st.Registry().List(context.Background(), intakeNamespace); err != nil || len(entries) != 2 {
		t.Fatalf("intake after the kill: %d entries (%v), want both replies'", len(entries), err)
	}
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	if d := b.sink.Next(t); d.Event.Text != "second reply" {
		t.Fatalf("delivery after the restart %q, want only the second reply", d.Event.Text)
	}
	intakeEmpty(t, st)
	b.settled(t)
	b.stop()
	b.stop = func() {}
	if n := b.sink.Taken(); n != 1 {
		t.Fatalf("the restarted instance delivered %d times, want once (the second reply)", n)
	}
	if _, resumed := b.p.IntakeStats(); resumed != 1 {
		t.Fatalf("%d intake entries resumed, want 1 (the first was delivered already)", resumed)
	}
}

// TestIntakeReactionToItsTargetDeliveredBeforeKillNotDeliveredAgain: a
// reaction turn the tenant's reaction_trigger_target sends to another chat
// than the reaction's, in the intake behind a thread reply of the
// reaction's chat, whose instance was killed after the relay stored its
// delivery (in the target's chat) and before it deleted the entry: the
// next instance finds that delivery in the ledger under the chat it went
// to, and deletes the entry without delivering it again. The sweep looked
// for it under the reaction's chat before, and delivered it twice.
func TestIntakeReactionToItsTargetDeliveredBeforeKillNotDeliveredAgain(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	configure := func(c *Config) {
		c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}, ReactionTriggerTarget: chanGeneral}
	}
	a := newEnvOn(t, fake, configure, &platform.Deps{Store: st, Clock: clk})
	release, stored := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.sink.Check = func(d platform.Delivery) error {
		if d.Event.Text == "a reply" {
			// Held until the reaction is in the intake behind it.
			select {
			case <-release:
				return nil
			case <-time.After(waitFor):
				return errors.New("the reaction was not answered")
			}
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return errors.New("the instance is dying")
		}
		defer close(stored)
		if d.ChatID != chanGeneral {
			return errors.New("the reaction turn not sent to its target")
		}
		// The relay's part, as relay/hub.go stores it; then the instance
		// dies before Deliver returns.
		if _, err := st.Ledger().Append(context.Background(), d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}}); err != nil {
			return err
		}
		return errors.New("killed after the ledger's commit")
	}
	reply := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "a reply")
	answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT0", reply)), "the reply")
	clk.Advance(time.Millisecond) // entries of one chat are ordered by when they were received
	a.event(t, teamA, "EvT1", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "eyes", "item_user": teamA.BotUser,
		"item": map[string]any{"type": "message", "channel": dmAda, "ts": "1768490000.000300"}, "event_ts": "1768490100.000300"}, http.StatusOK)
	close(release)
	select {
	case <-stored:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the reaction turn's delivery", waitFor)
	}
	a.stop() // the backoff after the "failed" delivery waits on clk: nothing more is delivered
	a.stop = func() {}
	if n := a.sink.Taken(); n != 1 {
		t.Fatalf("the killed instance's sink took %d deliveries, want the reply's", n)
	}
	if entries, _, err := st.Registry().List(context.Background(), intakeNamespace); err != nil || len(entries) != 1 {
		t.Fatalf("intake after the kill: %d entries (%v), want the reaction's", len(entries), err)
	}
	b := newEnvOn(t, fake, configure, &platform.Deps{Store: st, Clock: clk})
	intakeEmpty(t, st)
	b.settled(t)
	b.stop()
	b.stop = func() {}
	if n := b.sink.Taken(); n != 0 {
		t.Fatalf("the restarted instance delivered %d times, want none (the reaction turn was delivered already)", n)
	}
	if _, resumed := b.p.IntakeStats(); resumed != 0 {
		t.Fatalf("%d intake entries resumed, want none", resumed)
	}
}

// TestIntakeSweepReadsPastAnUnreadableLedgerRecord: on Redis, a ledger
// record that does not decode (another program or version wrote it;
// store.UnreadableRecord), stored before a delivery of an entry a killed
// instance left, does not keep the next instance from finding that
// delivery: the entry is deleted without being delivered again. The
// sweep failed its ledger read at that record before, for as long as it
// was stored, and delivered every such entry again.
func TestIntakeSweepReadsPastAnUnreadableLedgerRecord(t *testing.T) {
	clk := clocktest.New(time.Now())
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rc := srv.Client(t)
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	stored := make(chan struct{})
	var once sync.Once
	a.sink.Check = func(d platform.Delivery) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return errors.New("the instance is dying")
		}
		defer close(stored)
		ctx := context.Background()
		// The record that does not decode, then the delivery, as
		// relay/hub.go stores it; then the instance dies.
		if _, err := st.Ledger().Append(ctx, d.Tenant, []store.Record{{Platform: "discord", Payload: []byte("x")}}); err != nil {
			return err
		}
		seq, err := rc.Incr(ctx, "connector:seq:{"+d.Tenant+"}").Result()
		if err != nil {
			return err
		}
		if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "connector:log:{" + d.Tenant + "}", ID: sprintf("0-%d", seq),
			Values: []any{"k", "1", "p", platformName, "s", "s1", "c", d.ChatID, "r", "x", "d", "bad", "g", "x"}}).Err(); err != nil {
			return err
		}
		if _, err := st.Ledger().Append(ctx, d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}}); err != nil {
			return err
		}
		return errors.New("killed after the ledger's commit")
	}
	const thread = "1768490000.000100"
	for i, text := range []string{"first reply", "second reply"} {
		ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, sprintf("1768490100.00020%d", i), thread, text)
		answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, sprintf("EvT%d", i), ev)), text)
		clk.Advance(time.Millisecond) // entries of one chat are ordered by when they were received
	}
	select {
	case <-stored:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first reply's delivery", waitFor)
	}
	a.stop()
	a.stop = func() {}
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	if d := b.sink.Next(t); d.Event.Text != "second reply" {
		t.Fatalf("delivery after the restart %q, want only the second reply", d.Event.Text)
	}
	intakeEmpty(t, st)
	b.settled(t)
	b.stop()
	b.stop = func() {}
	if n := b.sink.Taken(); n != 1 {
		t.Fatalf("the restarted instance delivered %d times, want once (the second reply)", n)
	}
}

// TestIntakeEntryNotTakenForAnotherDeliveryOfItsMicrosecond: a message of
// a chat delivered at once, and a thread reply of the same chat received in
// the same microsecond that went to the intake, whose instance was killed
// before it was delivered: the restarted instance finds a delivery of that
// chat and microsecond in the ledger, but of another message (its ts), and
// delivers the reply rather than taking it for delivered.
func TestIntakeEntryNotTakenForAnotherDeliveryOfItsMicrosecond(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	a.sink.Check = func(d platform.Delivery) error {
		if d.Event.Text != "at once" {
			return errors.New("the instance is dying")
		}
		_, err := st.Ledger().Append(context.Background(), d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}})
		return err
	}
	// The clock stands still: both are received in the same microsecond.
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "at once")
	if code, _ := a.post(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT0", ev)); code != http.StatusOK {
		t.Fatalf("the message: %d, want 200", code)
	}
	if d := a.sink.Next(t); d.Event.Text != "at once" {
		t.Fatalf("delivered %q, want the message", d.Event.Text)
	}
	reply := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "a reply")
	answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT1", reply)), "the reply")
	a.stop()
	a.stop = func() {}
	if entries, _, err := st.Registry().List(context.Background(), intakeNamespace); err != nil || len(entries) != 1 {
		t.Fatalf("intake after the kill: %d entries (%v), want the reply's", len(entries), err)
	}
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	if d := b.sink.Next(t); d.Event.Text != "a reply" {
		t.Fatalf("delivery after the restart %q, want the reply", d.Event.Text)
	}
	intakeEmpty(t, st)
}

// TestIntakeCommandNotTakenForAnotherOfItsMicrosecond: a slash command of
// a chat delivered at once, and another of the same chat received in the
// same microsecond, left in the intake by a killed instance: the restarted
// instance finds a delivery of that chat and microsecond in the ledger,
// with no message id (a command's), but of another command, and delivers
// the entry's. It took the entry for delivered before, and lost it.
func TestIntakeCommandNotTakenForAnotherOfItsMicrosecond(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	a.sink.Check = func(d platform.Delivery) error {
		_, err := st.Ledger().Append(context.Background(), d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}})
		return err
	}
	command := func(name, trigger string) []byte {
		return []byte(url.Values{"team_id": {teamA.ID}, "channel_id": {chanGeneral}, "user_id": {userAda}, "command": {name},
			"trigger_id": {trigger}}.Encode())
	}
	// The clock stands still: both are received in the same microsecond.
	if code, body := a.post(t, CommandsPath, "application/x-www-form-urlencoded", command("/status", "1.1.a")); code != http.StatusOK {
		t.Fatalf("the first command: %d %s", code, body)
	}
	if d := a.sink.Next(t); d.Event.Text != "/status" {
		t.Fatalf("delivered %q, want the first command", d.Event.Text)
	}
	a.stop()
	a.stop = func() {}
	// The second, stored in the intake behind an entry of its chat when
	// its instance was killed.
	rec := intakeRecord{Route: routeCommands, Body: command("/new", "1.1.b"), Received: clk.Now().UnixNano()}
	if _, err := st.Registry().Put(t.Context(), intakeNamespace, intakeKey(teamA.ID+"/"+chanGeneral, rec), mustJSON(t, rec)); err != nil {
		t.Fatal(err)
	}
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	if d := b.sink.Next(t); d.Event.Text != "/new" {
		t.Fatalf("delivery after the restart %q, want the second command", d.Event.Text)
	}
	intakeEmpty(t, st)
}

// intakeWrites is a store counting the intake entries written.
type intakeWrites struct {
	store.Store
	n *atomic.Int64
}

// Registry implements store.Store.
func (s intakeWrites) Registry() store.Registry { return countingCAS{s.Store.Registry(), s.n} }

// countingCAS is a Registry counting its CompareAndSwap calls in the
// intake's namespace.
type countingCAS struct {
	store.Registry
	n *atomic.Int64
}

// CompareAndSwap implements store.Registry.
func (r countingCAS) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	if namespace == intakeNamespace {
		r.n.Add(1)
	}
	return r.Registry.CompareAndSwap(ctx, namespace, key, old, value)
}

// TestIntakeSkipsWhatTheSettingsDrop: a thread reply without a mention
// where thread_require_mention asks for one, and a top-level message with
// files without a mention where require_mention does, are dropped before
// their 200 as any message is, with no intake entry written; a reply that
// mentions the bot takes one.
func TestIntakeSkipsWhatTheSettingsDrop(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	var writes atomic.Int64
	m := &drops{got: map[string]int{}}
	on := true
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ThreadRequireMention: &on} }, &platform.Deps{Store: intakeWrites{st, &writes}, Metrics: m})
	const thread = "1768490000.000100"
	e.event(t, teamA, "EvT1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", thread, "no mention"), http.StatusOK)
	file := fileMessage(chanGeneral, "1768490100.000200", "F0SHOT0001", e.fake.URL+"/files/shot.png")
	file["text"] = "a shot"
	e.event(t, teamA, "EvT2", file, http.StatusOK)
	if n, want := m.count(dropThreadMention), 1; n != want {
		t.Fatalf("%d dropped %s, want %d", n, dropThreadMention, want)
	}
	if n, want := m.count(dropMentionRequired), 1; n != want {
		t.Fatalf("%d dropped %s, want %d", n, dropMentionRequired, want)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("%d intake entries written for messages the settings drop, want none", n)
	}
	e.event(t, teamA, "EvT3", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000300", thread, "<@"+teamA.BotUser+"> hi"), http.StatusOK)
	if d := e.sink.Next(t); d.Event.Text != "hi" {
		t.Fatalf("delivered %q, want the mentioned reply", d.Event.Text)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d intake entries written, want the mentioned reply's", n)
	}
	intakeEmpty(t, st)
}

// blockingLedger is a store whose ledger's Read, once armed, signals
// reading and waits for release.
type blockingLedger struct {
	store.Store
	armed   atomic.Bool
	reading chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingLedger) Ledger() store.Ledger { return blockingLedgerReads{s.Store.Ledger(), s} }

type blockingLedgerReads struct {
	store.Ledger
	s *blockingLedger
}

func (l blockingLedgerReads) Read(ctx context.Context, tenant string, after uint64, limit int, maxBytes int64) ([]store.Record, error) {
	if l.s.armed.Load() {
		l.s.once.Do(func() { close(l.s.reading) })
		select {
		case <-l.s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.Ledger.Read(ctx, tenant, after, limit, maxBytes)
}

// TestIntakeAnsweredWhileASweepReadsTheLedger: a sweep that took an entry
// another instance left reads the relay's ledger (every tenant's record)
// before it queues it; a request the intake takes meanwhile, of another
// chat, is answered without waiting for that read (it took the intake's
// queue lock, which the sweep held across the whole read).
func TestIntakeAnsweredWhileASweepReadsTheLedger(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &blockingLedger{Store: mem, reading: make(chan struct{}), release: make(chan struct{})}
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: mem, Clock: clk})
	a.sink.Check = func(platform.Delivery) error { return errors.New("the instance is dying") }
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvLeft",
		slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "left behind"))), "the reply a leaves")
	// The relay's ledger holds a record (so the sweep has one to read).
	if _, err := mem.Ledger().Append(t.Context(), "t1", []store.Record{{Platform: "discord", ChatID: "c1", Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	var release sync.Once
	unblock := func() { release.Do(func() { close(st.release) }) }
	t.Cleanup(unblock)
	a.stop() // its claim released: b's next sweep takes the entry
	a.stop = func() {}
	go b.p.sweepIntake(t.Context(), nil)
	select {
	case <-st.reading:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to read the ledger", waitFor)
	}
	codes := b.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvOther",
		slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490200.000300", "1768490000.000900", "<@"+teamA.BotUser+"> meanwhile")))
	answered(t, codes, "a reply of another chat while the sweep reads the ledger")
	unblock()
	var got []string
	for range 2 {
		got = append(got, b.sink.Next(t).Event.Text)
	}
	if !slices.Contains(got, "left behind") || !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "meanwhile") }) {
		t.Fatalf("b delivered %v, want the reply a left and the one it got meanwhile", got)
	}
}

// intakeUndeletable is a store whose intake entries cannot be deleted
// while failing is set.
type intakeUndeletable struct {
	store.Store
	failing atomic.Bool
}

func (s *intakeUndeletable) Registry() store.Registry {
	return undeletableRegistry{s.Store.Registry(), &s.failing}
}

type undeletableRegistry struct {
	store.Registry
	failing *atomic.Bool
}

func (r undeletableRegistry) Delete(ctx context.Context, namespace, key string) (bool, error) {
	if namespace == intakeNamespace && r.failing.Load() {
		return false, errors.New("store unreachable")
	}
	return r.Registry.Delete(ctx, namespace, key)
}

// TestIntakeExpiredKeptWhileTheStoreIsOut: an entry whose delivery failed
// for intakeRetryFor and that cannot be deleted either (the store out, the
// likely cause of both) gives its chat's turn up but is not dropped: it
// stays stored, no intake_expired is counted, and a later sweep delivers
// it once the store is back.
func TestIntakeExpiredKeptWhileTheStoreIsOut(t *testing.T) {
	clk := clocktest.New(time.Now())
	drops := &platformtest.LastDrop{}
	st := &intakeUndeletable{Store: store.NewMemory(nil)}
	t.Cleanup(func() { _ = st.Close() })
	st.failing.Store(true)
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Metrics: drops, Store: st})
	var out atomic.Bool
	out.Store(true)
	e.sink.Check = func(d platform.Delivery) error {
		if out.Load() && d.Event.Text == "kept" {
			return errors.New("the relay's store is unreachable")
		}
		return nil
	}
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490100.000100", "kept"), http.StatusOK)
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000300", "", "behind it"), http.StatusOK)
	clk.Drive(t, 1, func() int { return int(e.sink.Taken()) }, func() int { return 0 })
	if d := e.sink.Next(t); d.Event.Text != "behind it" {
		t.Fatalf("delivered %q, want the message behind the failing one", d.Event.Text)
	}
	e.settled(t)
	if r := drops.Take(); r == dropIntakeExpired {
		t.Fatalf("an entry the store kept was counted dropped (%s)", r)
	}
	entries, _, err := st.Store.Registry().List(context.Background(), intakeNamespace)
	if err != nil || !slices.ContainsFunc(entries, func(en store.Entry) bool {
		var rec intakeRecord
		return json.Unmarshal(en.Value, &rec) == nil && strings.Contains(string(rec.Body), `"text":"kept"`)
	}) {
		t.Fatalf("intake entries %d (%v), want the failing one kept", len(entries), err)
	}
	st.failing.Store(false)
	out.Store(false)
	platformtest.WaitUntil(t, "the kept entry delivered by a sweep as the injected clock moves a sweep at a time", func() bool {
		clk.Advance(intakeSweepEvery)
		return e.sink.Taken() >= 2
	})
	if d := e.sink.Next(t); d.Event.Text != "kept" {
		t.Fatalf("delivered %q, want the kept entry, taken again by a sweep", d.Event.Text)
	}
	intakeEmpty(t, st)
}

// listGate is a store whose intake listing, once armed, holds the
// armed-th listing's answer (telling listed) until release is closed.
type listGate struct {
	store.Store
	armed   atomic.Int32 // listings to go until the one held; 0: none
	listed  chan struct{}
	release chan struct{}
}

func (s *listGate) Registry() store.Registry { return gatedList{s.Store.Registry(), s} }

type gatedList struct {
	store.Registry
	s *listGate
}

func (r gatedList) List(ctx context.Context, namespace string) ([]store.Entry, uint64, error) {
	entries, rev, err := r.Registry.List(ctx, namespace)
	if namespace == intakeNamespace && r.s.armed.Load() > 0 && r.s.armed.Add(-1) == 0 {
		close(r.s.listed)
		<-r.s.release
	}
	return entries, rev, err
}

// TestSweepLeavesAnEntryHandledWhileItListed: a sweep lists the intake
// while an entry this instance holds is being delivered; the entry is
// delivered, deleted and let go before the sweep goes through its listing.
// The sweep does not take it again: it is gone. It was taken for one a
// killed instance left, handled again and dropped as a duplicate (an
// event of no dedupe key would have been delivered twice).
func TestSweepLeavesAnEntryHandledWhileItListed(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &listGate{Store: mem, listed: make(chan struct{}), release: make(chan struct{})}
	listDone := sync.OnceFunc(func() { close(st.release) })
	t.Cleanup(listDone)
	drops := &platformtest.LastDrop{}
	e := newEnv(t, nil, &platform.Deps{Store: st, Clock: clk, Metrics: drops})
	offered, deliver := make(chan struct{}), make(chan struct{})
	var first sync.Once
	e.sink.Check = func(platform.Delivery) error {
		first.Do(func() {
			close(offered)
			<-deliver
		})
		return nil
	}
	delivered := sync.OnceFunc(func() { close(deliver) })
	t.Cleanup(delivered)
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT1",
		slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "a reply"))), "the reply")
	select {
	case <-offered:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the reply's delivery", waitFor)
	}
	st.armed.Store(1) // the sweep's listing
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		e.p.sweepIntake(t.Context(), nil)
	}()
	select {
	case <-st.listed:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to list the intake", waitFor)
	}
	delivered()
	if d := e.sink.Next(t); d.Event.Text != "a reply" {
		t.Fatalf("delivered %q, want the reply", d.Event.Text)
	}
	e.settled(t)
	listDone()
	select {
	case <-swept:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to end", waitFor)
	}
	e.settled(t)
	if _, resumed := e.p.IntakeStats(); resumed != 0 {
		t.Fatalf("the sweep took %d entries again, want none: the reply was delivered and deleted", resumed)
	}
	if r := drops.Take(); r != "" {
		t.Fatalf("dropped %q, want nothing", r)
	}
	e.sink.Empty(t)
}

// TestSweepTakesAnEntryAsStoredNow: an entry's instance records where its
// delivery goes (deliveringTo) after a sweep listed the intake, before
// the sweep re-reads the entry: the sweep handles the entry as stored
// now, and its delivery goes there with nothing left to record. It
// handled the listing's copy before: its record of where the delivery
// goes did not match the entry's, and was refused with a warning.
func TestSweepTakesAnEntryAsStoredNow(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &listGate{Store: mem, listed: make(chan struct{}), release: make(chan struct{})}
	listDone := sync.OnceFunc(func() { close(st.release) })
	t.Cleanup(listDone)
	configure := func(c *Config) {
		c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}, ReactionTriggerTarget: chanGeneral}
	}
	e := newEnv(t, configure, &platform.Deps{Store: st, Clock: clk})
	reaction := map[string]any{"type": "reaction_added", "user": userAda, "reaction": "eyes", "item_user": teamA.BotUser,
		"item": map[string]any{"type": "message", "channel": dmAda, "ts": "1768490000.000300"}, "event_ts": "1768490100.000300"}
	rec := intakeRecord{Route: routeEvents, Body: slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT1", reaction), Received: clk.Now().UnixNano()}
	key := intakeKey(teamA.ID+"/"+dmAda, rec)
	if _, err := mem.Registry().Put(t.Context(), intakeNamespace, key, mustJSON(t, rec)); err != nil {
		t.Fatal(err)
	}
	st.armed.Store(1) // the sweep's listing
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		e.p.sweepIntake(t.Context(), nil)
	}()
	select {
	case <-st.listed:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to list the intake", waitFor)
	}
	to := rec
	to.To = chanGeneral
	if ok, err := mem.Registry().CompareAndSwap(t.Context(), intakeNamespace, key, mustJSON(t, rec), mustJSON(t, to)); err != nil || !ok {
		t.Fatalf("record where the entry is delivered: %v %v", ok, err)
	}
	listDone()
	if d := e.sink.Next(t); d.ChatID != chanGeneral {
		t.Fatalf("delivered to %s, want the reaction's target %s", d.ChatID, chanGeneral)
	}
	intakeEmpty(t, mem)
	select {
	case <-swept:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to end", waitFor)
	}
	e.settled(t)
	if logs := e.logs.String(); strings.Contains(logs, "not stored as read") {
		t.Fatalf("the sweep handled the listing's copy of the entry:\n%s", logs)
	}
}

// TestIntakeRetryReusesItsRehost: the relay refuses a message with a file
// twice (its store is down); the intake tries it again with backoff, and
// the third try is delivered with the file re-hosted once. Each try used
// to download and store the file again, and the copies, never delivered,
// filled the tenant's media quota until they expired, so its later
// attachments went without their files.
func TestIntakeRetryReusesItsRehost(t *testing.T) {
	clk := clocktest.New(time.Now())
	ms, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "https://connector.example", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Media: ms})
	e.sink.Refuse(2)
	url := e.fake.AddFile(teamA.ID, "F0IMG00009", "F0IMG00009.png", "image/png", []byte("\x89PNG\r\n\x1a\n.."))
	e.event(t, teamA, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0IMG00009", url), http.StatusOK)
	clk.Drive(t, 1, func() int { return int(e.sink.Taken()) }, func() int { return 0 })
	if d := e.sink.Next(t); len(d.Event.Media) != 1 || e.sink.Calls() != 3 {
		t.Fatalf("delivered with %d media after %d tries, want the file on the third", len(d.Event.Media), e.sink.Calls())
	}
	if n := ms.Stats().Objects; n != 1 {
		t.Fatalf("the media store holds %d objects, want the file once", n)
	}
}

// lostRenewals is a store whose claims' renewals, while lose is set, are
// made but answered with an error (as a Redis script that ran, every
// reply of go-redis's sends lost); each renewal's answer is sent on
// answers.
type lostRenewals struct {
	store.Store
	lose    atomic.Bool
	answers chan renewal
}

// renewal is a renewal's answer.
type renewal struct {
	renewed bool
	err     error
}

func (s *lostRenewals) Claims() store.Claims { return lostRenewalClaims{s.Store.Claims(), s} }

type lostRenewalClaims struct {
	store.Claims
	s *lostRenewals
}

func (c lostRenewalClaims) Renew(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	renewed, err := c.Claims.Renew(ctx, key, held, expires)
	if err == nil && c.s.lose.Load() {
		renewed, err = false, errors.New("i/o timeout (the renewal was made, its reply lost)")
	}
	c.s.answers <- renewal{renewed, err}
	return renewed, err
}

// TestIntakeClaimRenewedAfterALostReply: a renewal of an entry's claim
// that the store made but answered with an error (go-redis lost every
// reply) is followed by one that renews the claim. The keeper recorded the
// claim's earlier expiry only, and the next renewal found a claim lasting
// past it: it took it for another instance's and renewed no more, so the
// claim lapsed while the entry was handled, for another instance to take.
func TestIntakeClaimRenewedAfterALostReply(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &lostRenewals{Store: mem, answers: make(chan renewal, 16)}
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0"), Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	next := func(what string) renewal {
		t.Helper()
		select {
		case r := <-st.answers:
			return r
		case <-time.After(waitFor):
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
			return renewal{}
		}
	}
	st.lose.Store(true)
	clk.Advance(intakeRenewEvery)
	if r := next("the renewal whose reply is lost"); r.err == nil {
		t.Fatalf("the first renewal answered %+v, want its error", r)
	}
	st.lose.Store(false)
	clk.Advance(intakeRenewEvery)
	if r := next("the renewal after it"); !r.renewed || r.err != nil {
		t.Fatalf("the renewal after a lost reply answered %+v, want the claim renewed", r)
	}
	if logs := e.logs.String(); strings.Contains(logs, "taken by another instance") {
		t.Fatalf("the instance took its own claim for another's:\n%s", logs)
	}
}

// readGate is a store whose reads of an intake entry, once armed, wait
// for release (telling reading).
type readGate struct {
	store.Store
	armed   atomic.Bool
	reading chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *readGate) Registry() store.Registry { return gatedRead{s.Store.Registry(), s} }

type gatedRead struct {
	store.Registry
	s *readGate
}

func (r gatedRead) Get(ctx context.Context, namespace, key string) (store.Entry, bool, error) {
	if namespace == intakeNamespace && r.s.armed.Load() {
		r.s.once.Do(func() { close(r.s.reading) })
		select {
		case <-r.s.release:
		case <-ctx.Done():
			return store.Entry{}, false, ctx.Err()
		}
	}
	return r.Registry.Get(ctx, namespace, key)
}

// TestIntakeAnsweredWhileASweepReadsAnEntry: a sweep that claimed an entry
// another instance left reads it again before it queues it; a request the
// intake takes meanwhile, of another chat, is answered without waiting for
// that read. The sweep listed, claimed and read the entries under the
// intake's queue lock, which every such request waits for.
func TestIntakeAnsweredWhileASweepReadsAnEntry(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &readGate{Store: mem, reading: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, nil, &platform.Deps{Store: st, Clock: clk})
	rec := intakeRecord{Route: routeEvents, Received: clk.Now().UnixNano(), Body: slacktest.Envelope(teamA.ID, teamA.BotUser, "EvLeft",
		slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "left behind"))}
	if _, err := mem.Registry().Put(t.Context(), intakeNamespace, intakeKey(teamA.ID+"/"+dmAda, rec), mustJSON(t, rec)); err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	unblock := sync.OnceFunc(func() { close(st.release) })
	t.Cleanup(unblock)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		e.p.sweepIntake(t.Context(), nil)
	}()
	select {
	case <-st.reading:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to read the entry", waitFor)
	}
	codes := e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvOther",
		slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490200.000300", "1768490000.000900", "<@"+teamA.BotUser+"> meanwhile")))
	answered(t, codes, "a reply of another chat while the sweep reads an entry")
	unblock()
	var got []string
	for range 2 {
		got = append(got, e.sink.Next(t).Event.Text)
	}
	if !slices.Contains(got, "left behind") || !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "meanwhile") }) {
		t.Fatalf("delivered %v, want the reply left behind and the one received meanwhile", got)
	}
	select {
	case <-swept:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the sweep to end", waitFor)
	}
	intakeEmpty(t, mem)
}

// TestIntakeCommandDeliveredBeforeKillNotDeliveredAgain: a slash command's
// entry whose delivery the relay stored before its instance was killed,
// before it deleted the entry, is found in the ledger by the next
// instance's sweep (named by its chat, its microsecond, its user and text)
// and deleted without a second delivery.
func TestIntakeCommandDeliveredBeforeKillNotDeliveredAgain(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	a.sink.Check = func(d platform.Delivery) error {
		_, err := st.Ledger().Append(context.Background(), d.Tenant, []store.Record{{
			Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID, Payload: d.Event.AppendJSON(nil), Received: d.Received,
		}})
		return err
	}
	body := []byte(url.Values{"team_id": {teamA.ID}, "channel_id": {chanGeneral}, "user_id": {userAda}, "command": {"/status"},
		"text": {"all of it"}, "trigger_id": {"1.1.a"}}.Encode())
	if code, resp := a.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("the command: %d %s", code, resp)
	}
	d := a.sink.Next(t)
	a.stop()
	a.stop = func() {}
	// Its entry, left by the killed instance (as it stores one: the
	// command's body, received when its delivery says).
	rec := intakeRecord{Route: routeCommands, Body: body, Received: d.Received.UnixNano()}
	if _, err := st.Registry().Put(t.Context(), intakeNamespace, intakeKey(teamA.ID+"/"+chanGeneral, rec), mustJSON(t, rec)); err != nil {
		t.Fatal(err)
	}
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Clock: clk})
	intakeEmpty(t, st)
	b.settled(t)
	b.stop()
	b.stop = func() {}
	if n := b.sink.Taken(); n != 0 {
		t.Fatalf("the restarted instance delivered the command %d times again, want none", n)
	}
}

// TestIntakeFailedRenewalCountedWhileTheClaimSurelyHeld: a renewal that
// failed is counted as made (its expiry what the next renewal and the
// release compare) only when it was sent before the claim's last sure
// expiry: one sent later may find the claim taken by another instance,
// whose expiry the recorded one must stay short of.
func TestIntakeFailedRenewalCountedWhileTheClaimSurelyHeld(t *testing.T) {
	in := &intake{pending: map[string]int{}, held: map[string]heldEntry{}, until: map[string]time.Time{}, sure: map[string]time.Time{}, charged: map[charge]int{}}
	t0 := time.Now()
	in.take("k", "c", charge{tenant: "t"})
	in.claimed("k", t0.Add(intakeClaimTTL))
	sent := func(at time.Time, want time.Time) {
		t.Helper()
		in.mayHaveClaimed("k", at, at.Add(intakeClaimTTL))
		if got := in.claimUntil("k"); !got.Equal(want) {
			t.Fatalf("a failed renewal sent at +%v: claim until +%v, want +%v", at.Sub(t0), got.Sub(t0), want.Sub(t0))
		}
	}
	sent(t0.Add(intakeClaimTTL), t0.Add(intakeClaimTTL)) // as the sure claim lapsed
	sent(t0.Add(intakeRenewEvery), t0.Add(intakeRenewEvery+intakeClaimTTL))
	// Before the one that may have been made lapsed, but after the sure one.
	sent(t0.Add(intakeClaimTTL+time.Second), t0.Add(intakeRenewEvery+intakeClaimTTL))
	in.claimed("k", t0.Add(intakeClaimTTL+time.Second)) // a renewal that answered
	sent(t0.Add(intakeClaimTTL), t0.Add(2*intakeClaimTTL))
}

// releaseProbe is a store whose intake claim releases count those made
// while the intake's queue lock was held.
type releaseProbe struct {
	store.Store
	p                atomic.Pointer[Platform]
	released, locked atomic.Int64
}

func (s *releaseProbe) Claims() store.Claims { return releaseProbeClaims{s.Store.Claims(), s} }

type releaseProbeClaims struct {
	store.Claims
	s *releaseProbe
}

func (c releaseProbeClaims) Release(ctx context.Context, key string, expires time.Time) error {
	if p := c.s.p.Load(); p != nil && strings.HasPrefix(key, "slack/intake/") {
		c.s.released.Add(1)
		if !p.intake.queueMu.TryLock() {
			c.s.locked.Add(1)
		} else {
			p.intake.queueMu.Unlock()
		}
	}
	return c.Claims.Release(ctx, key, expires)
}

// TestIntakeRefusedEntryReleasedOutsideTheQueueLock: an entry a sweep
// took that the chat queues refuse (Run is ending) gives its claim up
// once the queue lock is let go, not under it: the release is a store
// call (up to intakeStoreTimeout) every request the intake takes would
// wait behind. Released, the entry is taken by the next sweep.
func TestIntakeRefusedEntryReleasedOutsideTheQueueLock(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &releaseProbe{Store: mem}
	e := newEnv(t, nil, &platform.Deps{Store: st, Clock: clk, Cluster: newNode(t, st, "i0")})
	st.p.Store(e.p)
	rec := intakeRecord{Route: routeEvents, Received: clk.Now().UnixNano(),
		Body: slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "left behind"))}
	if _, err := mem.Registry().Put(t.Context(), intakeNamespace, intakeKey(teamA.ID+"/"+dmAda, rec), mustJSON(t, rec)); err != nil {
		t.Fatal(err)
	}
	e.p.sweepIntake(t.Context(), e.p.queues.Close) // taken, then refused
	e.p.queues.Open()
	if n, locked := st.released.Load(), st.locked.Load(); n != 1 || locked != 0 {
		t.Fatalf("%d intake claims released, %d of them under the queue lock; want one, not under it", n, locked)
	}
	e.sink.Empty(t)
	e.p.sweepIntake(t.Context(), nil)
	if d := e.sink.Next(t); d.Event.Text != "left behind" {
		t.Fatalf("the next sweep delivered %+v, want the entry", d.Event)
	}
	intakeEmpty(t, mem)
}

// TestSweepDecodesOnlyTheLedgerOfItsChats: a sweep that took an entry
// another instance left looks for that entry's delivery in the relay's
// ledger, and decodes (and keeps) nothing of the ledger's other chats:
// a ledger of 5,000 Slack deliveries elsewhere costs it a few allocations
// per record, the store's read. Before, it decoded every record and held
// a name for each, however long the ledger, every sweep that took one.
func TestSweepDecodesOnlyTheLedgerOfItsChats(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	fake := newFake(t)
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: mem, Clock: clk})
	a.sink.Check = func(platform.Delivery) error { return errors.New("the instance is dying") }
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: mem, Clock: clk})
	answered(t, a.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "EvLeft",
		slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "1768490000.000100", "left behind"))), "the reply a leaves")
	const n = 5000
	recs := make([]store.Record, n)
	for i := range recs {
		recs[i] = store.Record{Platform: platformName, ChatID: chanOps, Received: clk.Now(),
			Payload: []byte(sprintf(`{"message_id":"1768480000.%06d","text":"elsewhere","source":{"user_id":"%s"}}`, i, userAda))}
	}
	if _, err := mem.Ledger().Append(t.Context(), "t1", recs); err != nil {
		t.Fatal(err)
	}
	a.stop() // its claim released: b's sweep takes the entry
	a.stop = func() {}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.p.sweepIntake(t.Context(), nil)
	runtime.ReadMemStats(&after)
	if d := b.sink.Next(t); d.Event.Text != "left behind" {
		t.Fatalf("b delivered %q, want the reply a left", d.Event.Text)
	}
	if allocs := after.Mallocs - before.Mallocs; allocs > 4*n {
		t.Errorf("the sweep allocated %d times for a ledger of %d records elsewhere, want at most %d", allocs, n, 4*n)
	}
}

// heldRenewals is a store whose claims' renewals tell entered, then wait
// for release (or their ctx), as one waiting for replicas that are down
// (store.redis_min_replicas) does.
type heldRenewals struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *heldRenewals) Claims() store.Claims { return heldRenewalClaims{s.Store.Claims(), s} }

type heldRenewalClaims struct {
	store.Claims
	s *heldRenewals
}

func (c heldRenewalClaims) Renew(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	c.s.entered <- struct{}{}
	select {
	case <-c.s.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return c.Claims.Renew(ctx, key, held, expires)
}

// TestIntakeClaimsRenewedTogether: the renewals of the entries held run
// together, not one after another. Each waits for the replicas (up to
// redis_replica_timeout, 1 s, when they are down), and the keeper renewed
// one entry at a time: some 120 entries outlasted the claims' 2 minutes,
// which lapsed while held, for another instance to take.
func TestIntakeClaimsRenewedTogether(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	st := &heldRenewals{Store: mem, entered: make(chan struct{}, 8), release: make(chan struct{})}
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0"), Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	t.Cleanup(sync.OnceFunc(func() { close(st.release) }))
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	// Held behind it, in its chat's turn.
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "", "and then"), http.StatusOK)
	e.event(t, teamA, "Ev3", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000300", "", "and more"), http.StatusOK)
	if pending, _ := e.p.IntakeStats(); pending != 3 {
		t.Fatalf("%d entries held, want 3", pending)
	}
	clk.Advance(intakeRenewEvery)
	for i := range 3 {
		select {
		case <-st.entered:
		case <-time.After(waitFor):
			t.Fatalf("timed out after %v waiting for renewal %d of 3 while the others wait for the replicas", waitFor, i+1)
		}
	}
}

// TestIntakeHoldsAtMostATenantsShare: behind a message of t1's whose file
// stalls, its chat's later messages are held in the intake up to half of
// it (t1 alone holds entries), the rest answered 503 (Slack sends them
// again), unstored; a slash command of that chat, which Slack does not
// send again, is answered "send it again" (t1 holds half the intake); a
// message of t2's whose file stalls too is still taken. Before, t1's lone
// chat was refused past intakeTenantShare (the other 448 places unused),
// and so was its slash command, lost.
func TestIntakeHoldsAtMostATenantsShare(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the downloads end
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	taken := 1
	for i := 1; i < intakeMaxHeld; i++ {
		body := slacktest.Envelope(teamA.ID, teamA.BotUser, fmt.Sprintf("Ev%d", i), slacktest.MessageEvent(teamA.ID, dmAda, userAda, fmt.Sprintf("1768490101.%06d", i), "", "held"))
		switch code, _ := e.post(t, EventsPath, "application/json", body); code {
		case http.StatusOK:
			taken++
		case http.StatusServiceUnavailable:
		default:
			t.Fatalf("t1's message %d answered %d", i, code)
		}
	}
	if pending, _ := e.p.IntakeStats(); taken != intakeMaxHeld/2 || pending != intakeMaxHeld/2 {
		t.Fatalf("t1's messages: %d taken, %d held, want %d", taken, pending, intakeMaxHeld/2)
	}
	if n := strings.Count(e.logs.String(), "slack intake full"); n != storeLogRate.Burst {
		t.Fatalf("%d warnings of the full intake logged, want %d", n, storeLogRate.Burst)
	}
	if code, body := e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/status", "", "")); code != http.StatusOK || !strings.Contains(body, "send it again") {
		t.Fatalf("t1's slash command past half the intake answered %d %q, want 200 and send it again", code, body)
	}
	url = e.fake.AddStalledFile(teamB.ID, "F0SLOW0002", "F0SLOW0002.png", "image/png", started)
	ev := fileMessage(chanAcme, "1768490103.000100", "F0SLOW0002", url)
	ev["team"], ev["user"], ev["text"] = teamB.ID, userBob, "<@"+teamB.BotUser+"> a shot"
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamB.ID, teamB.BotUser, "EvB", ev)), "t2's message with a stalled file")
	waitStarted(t, started, "t2's stalled file")
	if pending, _ := e.p.IntakeStats(); pending != intakeMaxHeld/2+1 {
		t.Fatalf("%d entries held, want %d", pending, intakeMaxHeld/2+1)
	}
}

// TestSlashCommandPastTheFullIntakeAnsweredBusy: a slash command the
// intake has no room for, which Slack does not send again, is answered 200
// with an ephemeral "send it again", not 503 (Slack's dispatch error); it
// is not delivered. Its tenant's commands fill half of what the other
// tenants leave at most: t1's stalled chat and its commands take 256
// places, t2's then 128 (half of the 256 left), and a third tenant still
// has room. Before, one tenant's commands took all 512 places, and every
// other tenant's requests were refused (messages 503, presses 503,
// commands busy) while they were held; later two busy tenants' took 256
// each, and a third tenant's were refused.
func TestSlashCommandPastTheFullIntakeAnsweredBusy(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 2)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the downloads end
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	command := func(team, chat, user string, n int) (int, string) {
		return e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(team, chat, user, "/status", fmt.Sprint(n), ""))
	}
	busy := func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, "ephemeral") && strings.Contains(body, "send it again")
	}
	for n := 1; n < intakeMaxHeld/2; n++ {
		if code, body := command(teamA.ID, dmAda, userAda, n); code != http.StatusOK || !strings.Contains(body, "Running") {
			t.Fatalf("t1's slash command %d answered %d %q, want it taken", n, code, body)
		}
	}
	if code, body := command(teamA.ID, dmAda, userAda, intakeMaxHeld/2); !busy(code, body) {
		t.Fatalf("t1's slash command past half the intake answered %d %q, want 200 and an ephemeral send it again", code, body)
	}
	url = e.fake.AddStalledFile(teamB.ID, "F0SLOW0002", "F0SLOW0002.png", "image/png", started)
	ev := fileMessage(chanAcme, "1768490103.000100", "F0SLOW0002", url)
	ev["team"], ev["user"], ev["text"] = teamB.ID, userBob, "<@"+teamB.BotUser+"> a shot"
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamB.ID, teamB.BotUser, "EvB", ev)), "t2's message with a stalled file")
	waitStarted(t, started, "t2's stalled file")
	for n := 1; n < intakeMaxHeld/4; n++ {
		if code, body := command(teamB.ID, chanAcme, userBob, n); code != http.StatusOK || !strings.Contains(body, "Running") {
			t.Fatalf("t2's slash command %d answered %d %q, want it taken", n, code, body)
		}
	}
	if code, body := command(teamB.ID, chanAcme, userBob, intakeMaxHeld/4); !busy(code, body) {
		t.Fatalf("t2's slash command past half of what t1 leaves answered %d %q, want 200 and an ephemeral send it again", code, body)
	}
	if pending, _ := e.p.IntakeStats(); pending != intakeMaxHeld*3/4 {
		t.Fatalf("%d entries held, want %d", pending, intakeMaxHeld*3/4)
	}
	if !e.p.intake.reserve(e.p.chargeOf("t3"), false) {
		t.Fatal("a third tenant's entry refused: the two busy tenants left it no room")
	}
	e.p.intake.unreserve(e.p.chargeOf("t3"))
}

// TestSlashCommandAnotherInstanceHandlesAnsweredBusy: a copy of a slash
// command whose trigger_id another instance sharing the store is handling
// (a load balancer sent the signed request again) is answered 503, not
// "send it again": the first copy delivers it, and a resend would run it
// twice. Before, it was answered 200 with the "send it again" text.
func TestSlashCommandAnotherInstanceHandlesAnsweredBusy(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	n, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: n, Clock: clk})
	body := slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", "")
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	// The other instance's pending claim on the trigger_id.
	key := "slack/pending/cmd/" + teamA.ID + ":" + form.Get("trigger_id")
	if ok, err := st.Claims().Claim(t.Context(), key, clk.Now().Add(pendingTTL)); err != nil || !ok {
		t.Fatalf("the other instance's claim: %v %v", ok, err)
	}
	if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusServiceUnavailable || strings.Contains(resp, "send it again") {
		t.Fatalf("the copy another instance handles answered %d %q, want 503", code, resp)
	}
	if n := e.sink.Taken(); n != 0 {
		t.Fatalf("delivered %d times, want none (the other instance delivers it)", n)
	}
}

// TestIntakeShareIsTheChatHoldersNotItsWorkspaces: #ops, in t1's
// workspace, is bound to t3, whose stalled chat fills half the intake;
// t1's message with a stalled file in #general is still taken. Before,
// every chat of a workspace counted toward the share of the workspace's
// tenant, so t3's messages (or a claimant's) refused t1's.
func TestIntakeShareIsTheChatHoldersNotItsWorkspaces(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	started := make(chan string, 4)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the downloads end
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanOps, "1768490100.000100", "F0SLOW0001", url))), "t3's message with a stalled file")
	waitStarted(t, started, "t3's stalled file")
	for i := 1; i < intakeMaxHeld/2; i++ {
		body := slacktest.Envelope(teamA.ID, teamA.BotUser, fmt.Sprintf("Ev%d", i), slacktest.MessageEvent(teamA.ID, chanOps, userAda, fmt.Sprintf("1768490101.%06d", i), "", "held"))
		if code, _ := e.post(t, EventsPath, "application/json", body); code != http.StatusOK {
			t.Fatalf("t3's message %d answered %d", i, code)
		}
	}
	url = e.fake.AddStalledFile(teamA.ID, "F0SLOW0002", "F0SLOW0002.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "EvT1", fileMessage(chanGeneral, "1768490103.000100", "F0SLOW0002", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	if pending, _ := e.p.IntakeStats(); pending != intakeMaxHeld/2+1 {
		t.Fatalf("%d entries held, want %d", pending, intakeMaxHeld/2+1)
	}
}

// TestIntakeReservesAtMostItsBound: the intake reserves intakeMaxHeld
// places at most, whichever tenants they are of, and a place given back
// is taken again.
func TestIntakeReservesAtMostItsBound(t *testing.T) {
	in := &intake{charged: map[charge]int{}, bound: func(string) int { return intakeMaxHeld }}
	for i := range intakeMaxHeld {
		if !in.reserve(charge{tenant: fmt.Sprintf("t%d", i)}, true) {
			t.Fatalf("place %d refused, want it taken", i)
		}
	}
	if in.reserve(charge{tenant: "tnew"}, true) {
		t.Fatalf("place %d taken, want it refused", intakeMaxHeld)
	}
	in.unreserve(charge{tenant: "t0"})
	if !in.reserve(charge{tenant: "tnew"}, true) {
		t.Fatal("a place given back refused, want it taken")
	}
}

// TestIntakeUnheldChatsShareOneShare: the events of the chats no tenant
// holds that route to no tenant are charged together, as one tenant's
// (""): before the intake is half full they may take their bound, then
// no more; a tenant's own chats still take their share of the rest.
func TestIntakeUnheldChatsShareOneShare(t *testing.T) {
	in := &intake{charged: map[charge]int{}, bound: func(string) int { return intakeMaxHeld / 2 }}
	for i := range intakeMaxHeld / 2 {
		if !in.reserve(charge{tenant: ""}, true) {
			t.Fatalf("unheld place %d refused, want it taken", i)
		}
	}
	if in.reserve(charge{tenant: ""}, true) {
		t.Fatal("an unheld chat's place past the half taken, want it refused")
	}
	for i := range intakeTenantShare {
		if !in.reserve(charge{tenant: "t1"}, true) {
			t.Fatalf("t1's place %d refused, want it taken", i)
		}
	}
	if in.reserve(charge{tenant: "t1"}, true) {
		t.Fatal("t1's place past its share taken, want it refused")
	}
}

// TestSweepTakesNoEntryBehindOneItCouldNotTake: a chat's first entry is
// claimed by another instance, alive, and its second is unclaimed. A
// sweep takes neither: the second waits for the first (taken with it once
// the first's claim lapses). Before, the sweep took the second, which was
// delivered before the first, beside it on the other instance.
func TestSweepTakesNoEntryBehindOneItCouldNotTake(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	e := newEnv(t, nil, &platform.Deps{Store: mem, Cluster: newNode(t, mem, "i1"), Clock: clk})
	ctx := t.Context()
	var keys []string
	for i, ts := range []string{"1768490100.000100", "1768490100.000200"} {
		ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, ts, "", "in order")
		rec := intakeRecord{Route: routeEvents, Body: slacktest.Envelope(teamA.ID, teamA.BotUser, fmt.Sprintf("EvO%d", i), ev), Received: clk.Now().Add(time.Duration(i)).UnixNano()}
		key := intakeKey(teamA.ID+"/"+dmAda, rec)
		if i == 0 { // the other instance's
			if ok, err := mem.Claims().Claim(ctx, intakeClaim(key), clk.Now().Add(intakeClaimTTL)); err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
		}
		if _, err := mem.Registry().Put(ctx, intakeNamespace, key, mustJSON(t, rec)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	e.p.sweepIntake(ctx, nil)
	if _, ok, err := mem.Registry().Get(ctx, intakeNamespace, keys[1]); err != nil || !ok {
		t.Fatalf("the second entry: stored %v (%v), want it left for its turn", ok, err)
	}
	if ok, err := mem.Claims().Claim(ctx, intakeClaim(keys[1]), clk.Now().Add(intakeClaimTTL)); err != nil || !ok {
		t.Fatalf("the second entry's claim: taken %v (%v), want it free: the sweep took the entry", ok, err)
	}
	e.sink.Empty(t)
}

// TestIntakeCommandsChargedToTheTenantTheyRouteTo: in workspace C, which
// no tenant binds, Cat (linked to t2) has a message whose file stalls, and
// her slash commands behind it fill half the intake; Dan's (linked to t3)
// in the same chat is still taken: each command is charged to the tenant
// it routes to. Before, every chat no tenant holds counted as one tenant's,
// and t2's users' commands there refused t3's.
func TestIntakeCommandsChargedToTheTenantTheyRouteTo(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t3"})
	started := make(chan string, 2)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userCat
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev0", ev)), "Cat's message with a stalled file")
	waitStarted(t, started, "Cat's stalled file")
	command := func(user string, n int) (int, string) {
		return e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamC.ID, chanNew, user, "/status", fmt.Sprint(n), ""))
	}
	for n := 1; n < intakeMaxHeld/2; n++ {
		if code, body := command(userCat, n); code != http.StatusOK || !strings.Contains(body, "Running") {
			t.Fatalf("Cat's slash command %d answered %d %q, want it taken", n, code, body)
		}
	}
	if code, body := command(userDan, 0); code != http.StatusOK || !strings.Contains(body, "Running") {
		t.Fatalf("Dan's slash command answered %d %q, want it taken (t3 holds nothing)", code, body)
	}
}

// TestIntakeOneTenantTakesTheWholeIntake: a deployment of one tenant takes
// slash commands behind its stalled chat until the intake is full, not half
// of it. Before, its 256th command was refused with 256 places unused.
func TestIntakeOneTenantTakesTheWholeIntake(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) {
		c.Teams, c.Tenants = map[string]string{teamA.ID: "t1"}, map[string]TenantConfig{"t1": {}}
	}, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	for n := 1; n < intakeMaxHeld; n++ {
		body := slacktest.Command(teamA.ID, dmAda, userAda, "/status", fmt.Sprint(n), "")
		if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK || !strings.Contains(resp, "Running") {
			t.Fatalf("t1's slash command %d answered %d %q, want it taken", n, code, resp)
		}
	}
	body := slacktest.Command(teamA.ID, dmAda, userAda, "/status", "full", "")
	if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK || !strings.Contains(resp, "send it again") {
		t.Fatalf("t1's slash command past the full intake answered %d %q, want send it again", code, resp)
	}
}

// TestSweepCountsWhatItTookOnce: once a sweep took a tenant's entries (half
// the intake), they count once: another tenant's command still finds the
// other half. Before, each counted twice until the sweep ended (its
// reservation and the entry held), and the intake was full meanwhile.
func TestSweepCountsWhatItTookOnce(t *testing.T) {
	clk := clocktest.New(time.Now())
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	e := newEnv(t, nil, &platform.Deps{Store: mem, Cluster: newNode(t, mem, "i1"), Clock: clk})
	ctx := t.Context()
	for i := range intakeMaxHeld / 2 {
		ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, fmt.Sprintf("1768490100.%06d", i), "", "left")
		rec := intakeRecord{Route: routeEvents, Body: slacktest.Envelope(teamA.ID, teamA.BotUser, fmt.Sprintf("EvL%d", i), ev), Received: clk.Now().Add(time.Duration(i)).UnixNano(), Tenant: "t1"}
		if _, err := mem.Registry().Put(ctx, intakeNamespace, intakeKey(teamA.ID+"/"+dmAda, rec), mustJSON(t, rec)); err != nil {
			t.Fatal(err)
		}
	}
	var room bool
	e.p.sweepIntake(ctx, func() {
		if room = e.p.intake.reserve(e.p.chargeOf("t2"), false); room {
			e.p.intake.unreserve(e.p.chargeOf("t2"))
		}
	})
	if !room {
		t.Fatal("t2 refused while the sweep queued what it took, want half the intake free")
	}
	for range intakeMaxHeld / 2 {
		e.sink.Next(t)
	}
}

// withResponseURL is the interactions body body with its payload's
// response_url set to u.
func withResponseURL(t *testing.T, body []byte, u string) []byte {
	t.Helper()
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal([]byte(form.Get("payload")), &payload); err != nil {
		t.Fatal(err)
	}
	payload["response_url"] = u
	form.Set("payload", string(mustJSON(t, payload)))
	return []byte(form.Encode())
}

// TestPressPastItsTenantsBoundAnsweredBusy: a prompt press the intake has
// no room for (its tenant's commands fill its bound), which Slack does not
// send again, is acknowledged (200) and its user told, ephemerally through
// the press's response_url, to press again; it is not delivered. Before,
// it was answered 503, and its user saw Slack's generic failure.
func TestPressPastItsTenantsBoundAnsweredBusy(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	for n := 1; n < e.p.intakeBound("t1"); n++ {
		body := slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", fmt.Sprint(n), "")
		if code, resp := e.post(t, CommandsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK || !strings.Contains(resp, "Running") {
			t.Fatalf("t1's slash command %d answered %d %q, want it taken", n, code, resp)
		}
	}
	press := withResponseURL(t, slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("busy"))
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the press past t1's bound answered %d %q, want 200", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	posts, err := e.fake.WaitResponses(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b := posts[0].Body; posts[0].ID != "busy" || b["response_type"] != "ephemeral" || b["replace_original"] != false || !strings.Contains(fmt.Sprint(b["text"]), "press it again") {
		t.Fatalf("the press's user was told %+v, want an ephemeral press it again", posts[0])
	}
	if pending, _ := e.p.IntakeStats(); pending != e.p.intakeBound("t1") {
		t.Fatalf("%d entries held, want %d (the press not taken)", pending, e.p.intakeBound("t1"))
	}
}

// TestPressWithoutResponseURLPastItsTenantsBoundAnsweredBusy: a press the
// intake has no room for whose payload carries no response_url is
// acknowledged (200) and its user told to press again with
// chat.postEphemeral in the press's channel, never publicly. Before, it was
// answered 503, and its user saw Slack's generic failure.
func TestPressWithoutResponseURLPastItsTenantsBoundAnsweredBusy(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	for range e.p.intakeBound("t1") - 1 {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	press := withResponseURL(t, slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once"), "")
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the press past t1's bound answered %d %q, want 200", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	eph, err := e.fake.WaitCalls(ctx, "chat.postEphemeral", 1)
	if err != nil {
		t.Fatal(err)
	}
	if f := eph[0].Form; f.Get("channel") != chanGeneral || f.Get("user") != userAda || !strings.Contains(f.Get("text"), "press it again") {
		t.Fatalf("the press's user was told %v, want an ephemeral press it again", f)
	}
	if n := len(e.fake.Calls("chat.postMessage")); n != 1 || len(e.fake.Responses()) != 0 {
		t.Fatalf("%d posts (want the prompt's alone), %d response_url posts", n, len(e.fake.Responses()))
	}
}

// TestIntakeMessagesChargedToTheTenantTheyRouteTo: in workspace C, which
// no tenant binds, Cat (linked to t2) has a message whose file stalls, and
// her messages behind it take half the intake; Dan's (linked to t3) in the
// same chat is still taken: a message is charged to the tenant its author
// routes it to. Before, the chats no tenant holds were charged as one
// tenant's, and t2's users' messages there refused t3's (503).
func TestIntakeMessagesChargedToTheTenantTheyRouteTo(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t3"})
	started := make(chan string, 2)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userCat
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev0", ev)), "Cat's message with a stalled file")
	waitStarted(t, started, "Cat's stalled file")
	message := func(user string, n int) int {
		body := slacktest.Envelope(teamC.ID, teamC.BotUser, fmt.Sprintf("Ev%s%d", user, n), slacktest.MessageEvent(teamC.ID, chanNew, user, fmt.Sprintf("1768490101.%06d", n), "", "held"))
		code, _ := e.post(t, EventsPath, "application/json", body)
		return code
	}
	for n := 1; n < intakeMaxHeld/2; n++ {
		if code := message(userCat, n); code != http.StatusOK {
			t.Fatalf("Cat's message %d answered %d, want it taken", n, code)
		}
	}
	if code := message(userDan, intakeMaxHeld); code != http.StatusOK {
		t.Fatalf("Dan's message answered %d, want it taken (t3 holds nothing)", code)
	}
}

// TestPressChargedToItsPressersTenant: in workspace C, which no tenant
// binds, t1 (Cat's) posted a prompt and Dan's (t2's) message there stalls;
// with t1's bound taken, Dan's press of t1's prompt is still taken: a press
// is charged to the tenant its presser routes to, as a slash command is.
// Before, it was charged to the prompt's tenant, so another tenant's users
// pressing a prompt in such a chat spent t1's share (and refused t1's
// commands and presses in its own chats).
func TestPressChargedToItsPressersTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t1"}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t2"})
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490000.000100", "", "deploy?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("Cat's message delivered to %s, want t1", d.Tenant)
	}
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+chanNew+`","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userDan
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev2", ev)), "Dan's message with a stalled file")
	waitStarted(t, started, "Dan's stalled file")
	for range e.p.intakeBound("t1") {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	press := withResponseURL(t, slacktest.Press(teamC.ID, chanNew, userDan, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("busy"))
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("Dan's press answered %d %q, want 200", code, body)
	}
	if pending, _ := e.p.IntakeStats(); pending != 2 {
		t.Fatalf("%d entries held, want 2 (Dan's press taken behind his message)", pending)
	}
}

// TestIntakeReactionChargedToItsReactorsTenant: in workspace C, which no
// tenant binds, Cat's (t2's) message stalls and the chats no tenant holds
// have their part of the intake taken; Dan's (t3's) reaction there, queued
// behind Cat's message, is still taken: a reaction is charged to the tenant
// its reactor routes to, as it is delivered (ingestReaction). Before, it
// was charged to those chats' common part, so one tenant's linked users'
// reactions there filled it and, with that tenant's own share, the intake.
func TestIntakeReactionChargedToItsReactorsTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t3"})
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userCat
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev0", ev)), "Cat's message with a stalled file")
	waitStarted(t, started, "Cat's stalled file")
	for range e.p.intakeBound("") {
		if !e.p.intake.reserve(e.p.chargeOf(""), false) {
			t.Fatal("the unheld chats' reservation refused below their bound")
		}
	}
	e.event(t, teamC, "Ev1", map[string]any{"type": "reaction_added", "user": userDan, "reaction": "+1",
		"item": map[string]any{"type": "message", "channel": chanNew, "ts": "1768490100.000100"}, "event_ts": "1768490101.000100"}, http.StatusOK)
	if pending, _ := e.p.IntakeStats(); pending != 2 {
		t.Fatalf("%d entries held, want 2 (Dan's reaction taken behind Cat's message)", pending)
	}
}

// TestIntakeUnheldChatsTakeNoHalf: in workspace C, which no tenant binds,
// Cat's (t2's) message stalls; messages of a user no tenant's queued
// behind it there, and Cat's slash commands, take what the intake lets
// them; t3's (Dan's) thread replies in its own chat are still taken: the
// events routed to no tenant are charged at most a tenant's share, not
// half the intake. Before, they took half (an outsider in a chat the bot
// sits in, or t2's unlinked accounts pressing its prompt there), t2's
// commands the other half, and every tenant's slow messages were refused
// (503) on the instance.
func TestIntakeUnheldChatsTakeNoHalf(t *testing.T) {
	const userEve = "U0EVE00005" // of C, linked to no tenant
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"})
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490000.000100", "", "deploy?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("Cat's message delivered to %s, want t2", d.Tenant)
	}
	r := e.execute(t, "t2", `{"op":"prompt","chat_id":"`+chanNew+`","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userCat
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev0", ev)), "Cat's message with a stalled file")
	waitStarted(t, started, "Cat's stalled file")
	for n := 1; n < intakeMaxHeld/2; n++ { // as many as the intake takes
		body := slacktest.Envelope(teamC.ID, teamC.BotUser, fmt.Sprintf("EvE%d", n), slacktest.MessageEvent(teamC.ID, chanNew, userEve, fmt.Sprintf("1768490101.%06d", n), "", "held"))
		e.post(t, EventsPath, "application/json", body)
	}
	for n := 1; n < intakeMaxHeld/2; n++ {
		e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamC.ID, chanNew, userCat, "/status", fmt.Sprint(n), ""))
	}
	press := withResponseURL(t, slacktest.Press(teamC.ID, chanNew, userEve, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("eve"))
	e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press)
	pending := func() int { n, _ := e.p.IntakeStats(); return n }
	for n := range 8 {
		ts := fmt.Sprintf("1768490102.%06d", n)
		body := slacktest.Envelope(teamA.ID, teamA.BotUser, fmt.Sprintf("EvD%d", n), slacktest.MessageEvent(teamA.ID, chanOps, userAda, ts, "1768490000.000100", "a reply"))
		if code, _ := e.post(t, EventsPath, "application/json", body); code != http.StatusOK {
			t.Fatalf("t3's thread reply %d answered %d, want it taken (%d entries held)", n, code, pending())
		}
	}
}

// TestBusyPostEndsWithRun: the busy answer to a press over HTTP, posted
// after its 200 to a response_url that never answers, ends when Run does,
// not request_timeout later: its request's handler returns at shutdown.
func TestBusyPostEndsWithRun(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.RequestTimeout = 3 * waitFor }, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	for range e.p.intakeBound("t1") - 1 {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	posting := make(chan string, 1)
	e.fake.StallResponses(posting)
	press := withResponseURL(t, slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("busy"))
	codes := e.postAsync(t, InteractionsPath, "application/x-www-form-urlencoded", press)
	waitStarted(t, posting, "the busy post")
	e.stop()
	e.stop = func() {}
	answered(t, codes, "the busy press, its post cut short by the shutdown")
}

// TestBusyPostsChargedToTheirTenant: t1's users press its prompt
// while t1's intake is full, and the busy answers' response_urls never
// answer: t1's posts take half of maxBusyPosts, its presses past them are
// acknowledged and counted dropped (overloaded), and t2's user pressing
// t2's prompt while t2's intake is full is still told. Before, busy posts
// were charged to no tenant: t1's took every slot, and t2's users were
// never told.
func TestBusyPostsChargedToTheirTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	m := &drops{got: map[string]int{}}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Metrics: m})
	prompt := func(tenant, chat string) string {
		r := e.execute(t, tenant, `{"op":"prompt","chat_id":"`+chat+`","content":"Deploy?","prompt_kind":"approval",
			"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
		if !r.Success {
			t.Fatalf("%s's prompt: %+v", tenant, r)
		}
		return r.MessageID
	}
	p1, p2 := prompt("t1", chanGeneral), prompt("t2", chanAcme)
	started := make(chan string, 2)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the downloads end
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	url = e.fake.AddStalledFile(teamB.ID, "F0SLOW0002", "F0SLOW0002.png", "image/png", started)
	ev := fileMessage(chanAcme, "1768490103.000100", "F0SLOW0002", url)
	ev["team"], ev["user"], ev["text"] = teamB.ID, userBob, "<@"+teamB.BotUser+"> a shot"
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamB.ID, teamB.BotUser, "EvB", ev)), "t2's message with a stalled file")
	waitStarted(t, started, "t2's stalled file")
	for _, tenant := range []string{"t1", "t2"} {
		for e.p.intake.reserve(e.p.chargeOf(tenant), false) {
		}
	}
	posting := make(chan string, maxBusyPosts+1)
	e.fake.StallResponses(posting)
	for n := range maxBusyPosts {
		press := withResponseURL(t, slacktest.Press(teamA.ID, chanGeneral, userAda, p1, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL(sprintf("t1-%d", n)))
		answered(t, e.postAsync(t, InteractionsPath, "application/x-www-form-urlencoded", press), sprintf("t1's busy press %d", n))
	}
	platformtest.WaitUntil(t, "t1's busy presses past its part of the posts to be counted", func() bool {
		return m.count(dropOverloaded) == maxBusyPosts/2 && len(posting) == maxBusyPosts/2
	})
	press := withResponseURL(t, slacktest.Press(teamB.ID, chanAcme, userBob, p2, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("t2"))
	answered(t, e.postAsync(t, InteractionsPath, "application/x-www-form-urlencoded", press), "t2's busy press")
	platformtest.WaitUntil(t, "t2's busy post", func() bool { return len(posting) == maxBusyPosts/2+1 })
	if n := m.count(dropOverloaded); n != maxBusyPosts/2 {
		t.Fatalf("%d busy presses dropped, want t1's %d past its part", n, maxBusyPosts/2)
	}
}

// TestSecondPressTakesNoIntakeEntry: a press of a prompt already answered
// here, in a chat whose requests go to the intake (a message of it waits
// on a stalled file), is dropped as the duplicate it is before the intake:
// 200, not delivered, no entry taken. Before, each press took an entry
// until the dedupe in its turn dropped it.
func TestSecondPressTakesNoIntakeEntry(t *testing.T) {
	clk := clocktest.New(time.Now())
	m := &drops{got: map[string]int{}}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Metrics: m})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	press := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the first press answered %d %q", code, body)
	}
	if d := e.sink.Next(t); d.Event.PromptResponse == nil {
		t.Fatalf("the first press delivered as %+v", d.Event)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the second press answered %d %q", code, body)
	}
	if pending, _ := e.p.IntakeStats(); pending != 1 || m.count(dropDuplicate) != 1 {
		t.Fatalf("%d intake entries, %d duplicates dropped; want 1 (the message), 1 (the second press)", pending, m.count(dropDuplicate))
	}
	e.sink.Empty(t)
}

// TestSecondPressOnAnotherInstanceTakesNoIntakeEntry: with two instances
// on Redis, a press of a prompt instance a delivered, pressed again on
// instance b in a chat whose requests go to b's intake (a message of it
// waits on a stalled file), is dropped there as the duplicate it is before
// the intake (the store's done mark): 200, not delivered, no entry taken.
// Before, b took an entry for it (only a delivers knew the prompt
// pressed) until the dedupe in its turn dropped it.
func TestSecondPressOnAnotherInstanceTakesNoIntakeEntry(t *testing.T) {
	clk := clocktest.New(time.Now())
	url := redistest.Start(t, redistest.Options{}).URL()
	open := func() store.Store {
		st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: url, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	fake := newFake(t)
	ms := newMediaStore(t)
	m := &drops{got: map[string]int{}}
	sa, sb := open(), open()
	a := newEnvOn(t, fake, nil, &platform.Deps{Store: sa, Cluster: newNode(t, sa, "i0"), Media: ms, Clock: clk})
	b := newEnvOn(t, fake, nil, &platform.Deps{Store: sb, Cluster: newNode(t, sb, "i1"), Media: ms, Clock: clk, Metrics: m})
	r := a.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	press := slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, body := a.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the first press answered %d %q", code, body)
	}
	if d := a.sink.Next(t); d.Event.PromptResponse == nil {
		t.Fatalf("the first press delivered as %+v", d.Event)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	slow := fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, b.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", slow))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	if code, body := b.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the second press answered %d %q", code, body)
	}
	if pending, _ := b.p.IntakeStats(); pending != 1 || m.count(dropDuplicate) != 1 {
		t.Fatalf("%d intake entries, %d duplicates dropped on b; want 1 (the message), 1 (the second press)", pending, m.count(dropDuplicate))
	}
	a.sink.Empty(t)
	b.sink.Empty(t)
}

// TestSecondPressPastAFullIntakeDroppedAsDuplicate: a press of a prompt
// already answered, in a chat whose requests go to the intake while its
// tenant's bound is taken, is dropped as the duplicate it is (200), its
// user not told to press again. Before, the full intake refused it first
// and its user was told to press a prompt already answered again.
func TestSecondPressPastAFullIntakeDroppedAsDuplicate(t *testing.T) {
	clk := clocktest.New(time.Now())
	m := &drops{got: map[string]int{}}
	e := newEnv(t, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk, Metrics: m})
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	press := withResponseURL(t, slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL("busy"))
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the first press answered %d %q", code, body)
	}
	if d := e.sink.Next(t); d.Event.PromptResponse == nil {
		t.Fatalf("the first press delivered as %+v", d.Event)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	for range e.p.intakeBound("t1") - 1 {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the second press answered %d %q", code, body)
	}
	if m.count(dropDuplicate) != 1 || len(e.fake.Responses()) != 0 {
		t.Fatalf("%d duplicates dropped, %d response_url posts; want 1, none", m.count(dropDuplicate), len(e.fake.Responses()))
	}
	e.sink.Empty(t)
}

// TestSharedChannelBusyPressToldWithThePromptsToken: in a Slack Connect
// channel shared by A (t1's) and B (t2's), Bob of B presses t1's prompt
// past t2's bound (his tenant's, charged), in a payload without a response_url that names B as
// its team: he is told with A's token, the workspace that posted the
// prompt, as the press is handled, never with t2's. Before, the payload's
// team chose the token.
func TestSharedChannelBusyPressToldWithThePromptsToken(t *testing.T) {
	const shared = "C0SHR00001"
	clk := clocktest.New(time.Now())
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, nil, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	e.p.seenIn(shared, teamA.ID)
	e.p.seenIn(shared, teamB.ID)
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+shared+`","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	answered(t, e.postAsync(t, EventsPath, "application/json",
		slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0", fileMessage(shared, "1768490100.000100", "F0SLOW0001", url))), "t1's message with a stalled file")
	waitStarted(t, started, "t1's stalled file")
	for e.p.intake.reserve(e.p.chargeOf("t2"), false) { // the press is charged to its presser's tenant
	}
	press := withResponseURL(t, slacktest.PressFrom(teamB.ID, teamB.ID, shared, userBob, r.MessageID, "", "hp1:p1:once", "Approve once"), "")
	if code, body := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", press); code != http.StatusOK {
		t.Fatalf("the press past t1's bound answered %d %q, want 200", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	eph, err := e.fake.WaitCalls(ctx, "chat.postEphemeral", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := eph[0]; c.Team != teamA.ID || c.Form.Get("channel") != shared || c.Form.Get("user") != userBob {
		t.Fatalf("Bob told with %s's token in %s to %s, want A's in %s to Bob", c.Team, c.Form.Get("channel"), c.Form.Get("user"), shared)
	}
}

// TestSlowMessagePastAFullIntakeAsksNothingOfTheStore: once t1 holds its
// part of the intake, its slow messages (thread replies) are refused (503,
// Slack sends them again) without a store round trip: a flood of them,
// which on Socket Mode is read in the reader's goroutine, costs the store
// nothing and holds no other tenant's envelopes behind a slow store.
// Before, each read the dedupe's marks (two claims) ahead of the refusal.
func TestSlowMessagePastAFullIntakeAsksNothingOfTheStore(t *testing.T) {
	st := &countingStore{Store: newSharedStore(t)}
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	for e.p.intake.reserve(e.p.chargeOf("t1"), true) {
	}
	before := st.writes.Load()
	for n := range 3 {
		reply := slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, fmt.Sprintf("1768490101.%06d", n), "1768490100.000100", "<@U0BOTA0001> and now?")
		e.event(t, teamA, fmt.Sprintf("Ev%d", n), reply, http.StatusServiceUnavailable)
	}
	if n := st.writes.Load() - before; n != 0 {
		t.Fatalf("3 thread replies past t1's part of the intake took %d store claims, want 0", n)
	}
}

// TestBusyPressChargedToItsPressersTenant: in workspace C, which no tenant
// binds, Dan (t2's) presses t1's prompt past t2's bound: his busy answers,
// stalled, are charged to t2, as his presses were, and t1 still has its
// part of the busy posts for its own users. Before, they were charged to
// the prompt's tenant, so another tenant's (or no tenant's) users pressing
// t1's prompt took t1's part of the posts and t1's share of the
// workspace's chat.postEphemeral budget.
func TestBusyPressChargedToItsPressersTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := ownershipEnv(t, &platform.Deps{Media: newMediaStore(t), Clock: clk},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t1"}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t2"})
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490000.000100", "", "deploy?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("Cat's message delivered to %s, want t1", d.Tenant)
	}
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"`+chanNew+`","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	url := e.fake.AddStalledFile(teamC.ID, "F0SLOW0003", "F0SLOW0003.png", "image/png", started)
	ev := fileMessage(chanNew, "1768490100.000100", "F0SLOW0003", url)
	ev["team"], ev["user"] = teamC.ID, userDan
	answered(t, e.postAsync(t, EventsPath, "application/json", slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev2", ev)), "Dan's message with a stalled file")
	waitStarted(t, started, "Dan's stalled file")
	for e.p.intake.reserve(e.p.chargeOf("t2"), false) {
	}
	posting := make(chan string, maxBusyPosts)
	e.fake.StallResponses(posting)
	for n := range maxBusyPosts / 2 {
		press := withResponseURL(t, slacktest.Press(teamC.ID, chanNew, userDan, r.MessageID, "", "hp1:p1:once", "Approve once"), e.fake.ResponseURL(sprintf("dan-%d", n)))
		answered(t, e.postAsync(t, InteractionsPath, "application/x-www-form-urlencoded", press), sprintf("Dan's busy press %d", n))
	}
	platformtest.WaitUntil(t, "Dan's busy posts to stall", func() bool { return len(posting) == maxBusyPosts/2 })
	if !e.p.busyPosts.Take("t1") {
		t.Fatal("t1 has no part of the busy posts left: Dan's were charged to it, not to t2")
	}
	e.p.busyPosts.Give("t1")
}

// TestLedgerHeldReadsBoundedPages: a sweep reads the relay's ledger in
// pages bounded by bytes (ledgerPageBytes), and reads on past a page its
// bytes cut short: of three deliveries of 9 MiB each (two to a page), all
// are found. Before,
// each page was up to ledgerPage records of any size.
func TestLedgerHeldReadsBoundedPages(t *testing.T) {
	mem := store.NewMemory(nil)
	t.Cleanup(func() { _ = mem.Close() })
	st := &boundedReads{Store: mem}
	e := newEnv(t, nil, &platform.Deps{Store: st})
	received := time.UnixMicro(1768490000_000000)
	pad := strings.Repeat("x", 9<<20)
	var want []string
	for i := range 3 {
		id := sprintf("1768480000.%06d", i)
		rec := store.Record{Platform: platformName, ChatID: chanGeneral, Received: received,
			Payload: []byte(sprintf(`{"message_id":"%s","text":"%s"}`, id, pad))}
		if _, err := mem.Ledger().Append(t.Context(), "t1", []store.Record{rec}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ledgerName(chanGeneral, received, id))
	}
	held, err := e.p.ledgerHeld(t.Context(), map[string]bool{chanGeneral: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !held[name] {
			t.Errorf("%s not found in the ledger", name)
		}
	}
	if n := st.unbounded.Load(); n != 0 {
		t.Errorf("%d ledger reads with no byte bound", n)
	}
}

// boundedReads is a store counting its ledger's reads with no byte bound.
type boundedReads struct {
	store.Store
	unbounded atomic.Int64
}

func (s *boundedReads) Ledger() store.Ledger { return boundedLedgerReads{s.Store.Ledger(), s} }

type boundedLedgerReads struct {
	store.Ledger
	s *boundedReads
}

func (l boundedLedgerReads) Read(ctx context.Context, tenant string, after uint64, limit int, maxBytes int64) ([]store.Record, error) {
	if maxBytes <= 0 {
		l.s.unbounded.Add(1)
	}
	return l.Ledger.Read(ctx, tenant, after, limit, maxBytes)
}
