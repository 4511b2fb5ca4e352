package slack

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/store"
)

// socketDeps runs Exclusive on st's leases, as serve does with several
// instances, under instance's name.
func socketDeps(st store.Store, instance string) *platform.Deps {
	return &platform.Deps{
		Store:   st,
		Cluster: &platform.Cluster{Instance: instance, PubSub: st.PubSub(), Beat: 100 * time.Millisecond},
		Exclusive: func(ctx context.Context, name string, run func(context.Context) error) error {
			return store.RunExclusive(ctx, clock.System, st.Leases(), "ingest/"+name, instance, 300*time.Millisecond, run)
		},
	}
}

// TestSocketModeUnderALease: with app_token, one instance holds the Socket
// Mode connection; an envelope is acknowledged once its event is stored;
// when that instance stops, the other takes the lease and connects, and
// events keep flowing.
func TestSocketModeUnderALease(t *testing.T) {
	st := newSharedStore(t)
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	a := newEnv(t, socket, socketDeps(st, "i0"))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := a.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b := newEnvOn(t, a.fake, socket, socketDeps(st, "i1"))
	push := func(fake *slacktest.Server, ts, text string) string {
		t.Helper()
		env := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev"+ts, slacktest.MessageEvent(teamA.ID, dmAda, userAda, ts, "", text))
		id, err := fake.PushEvent(ctx, "events_api", env)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := push(a.fake, "1768490100.000100", "over the socket")
	d := a.sink.Next(t)
	if d.Tenant != "t1" || d.Event.Text != "over the socket" {
		t.Fatalf("%+v", d)
	}
	if _, err := a.fake.WaitAck(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A slash command over the socket is acknowledged with its ephemeral
	// answer.
	cmd, _ := json.Marshal(map[string]string{"team_id": teamA.ID, "channel_id": chanGeneral, "user_id": userAda, "command": "/status",
		"text": "", "response_url": a.fake.ResponseURL("r9")})
	cid, err := a.fake.PushEvent(ctx, "slash_commands", cmd)
	if err != nil {
		t.Fatal(err)
	}
	if d := a.sink.Next(t); d.Event.Text != "/status" {
		t.Fatalf("%+v", d.Event)
	}
	payload, err := a.fake.WaitAck(ctx, cid)
	if err != nil || !strings.Contains(string(payload), "Running `/status`") {
		t.Fatalf("ack %s %v", payload, err)
	}
	// Instance i0 stops: i1 takes the lease and the connection.
	a.stop()
	a.stop = func() {}
	if err := a.fake.WaitSocket(ctx, 2); err != nil {
		t.Fatal(err)
	}
	push(a.fake, "1768490100.000200", "after the move")
	if d := b.sink.Next(t); d.Event.Text != "after the move" {
		t.Fatalf("%+v", d)
	}
}
