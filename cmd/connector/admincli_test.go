package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connector/admin"
	"connector/internal/clock"
	"connector/internal/refusedtest"
	"connector/registry"
)

// TestAdminCLIRotateWithoutGraceSaysTheOldSecretsEnded: "gateway rotate …
// 0s" says the previous secrets end now, not that they "stay valid until"
// this instant, and that the sockets on them close (as the relay does:
// TestRemovedSecretClosesItsSockets; before, it said they stayed until
// they reconnected); with a grace it says until when.
func TestAdminCLIRotateWithoutGraceSaysTheOldSecretsEnded(t *testing.T) {
	_, srv := adminCLIRig(t)
	code, out, errOut := runCmd(t, "admin", "-url", srv.URL, "gateway", "rotate", "acme", "acme-gw", "0s")
	if code != 0 || !strings.Contains(out, "GATEWAY_RELAY_SECRET=") ||
		errOut != "the previous secrets are no longer valid: the sockets that authenticated with one are closed (4401 revoked) and an upgrade signed with one is refused (4401)\n" {
		t.Fatalf("rotate 0s: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, _, errOut = runCmd(t, "admin", "-url", srv.URL, "gateway", "rotate", "acme", "acme-gw", "10m")
	until, err := time.Parse(time.RFC3339, strings.TrimSpace(strings.TrimPrefix(errOut, "the previous secrets stay valid until ")))
	if code != 0 || err != nil || until.Before(time.Now().Add(9*time.Minute)) {
		t.Fatalf("rotate 10m: exit %d, stderr %q", code, errOut)
	}
}

// adminCLIRig serves an admin API on a registry holding tenant acme and
// its gateway acme-gw, with $CONNECTOR_ADMIN_TOKEN set for the CLI.
func adminCLIRig(t *testing.T) (*registry.Registry, *httptest.Server) {
	t.Helper()
	reg := registry.New(memStore(t), clock.System)
	ctx := context.Background()
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGateway(ctx, "acme", "acme-gw"); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Config{Registry: reg, Token: adminToken, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv(envAdminToken, adminToken)
	return reg, srv
}

// TestAdminCLIWithoutAdminListenerSaysWhy: pointed at an address where
// nothing listens, the admin CLI says how the admin API is turned on and
// found, not just "connection refused".
func TestAdminCLIWithoutAdminListenerSaysWhy(t *testing.T) {
	url := "http://" + refusedtest.Addr(t)
	t.Setenv(envAdminToken, adminToken)
	for _, args := range [][]string{{"tenants"}, {"backup", "-o", t.TempDir() + "/b.db"}} {
		code, _, errOut := runCmd(t, append([]string{"admin", "-url", url}, args...)...)
		if code != 1 || !strings.Contains(errOut, "nothing listens at "+url+": the admin API is off unless the connector's config sets admin.listen") ||
			!strings.Contains(errOut, "-url or $CONNECTOR_ADMIN_URL") {
			t.Errorf("admin %s: exit %d, stderr %q", args[0], code, errOut)
		}
	}
}

// TestAdminCLIEscapesIDsInThePath: an id on the command line is one path
// segment, whatever it holds: "tenant rm acme/gateways/acme-gw" asks for
// a tenant of that id (none: 404) instead of deleting acme's gateway, and
// a "?" does not cut the path short.
func TestAdminCLIEscapesIDsInThePath(t *testing.T) {
	reg, srv := adminCLIRig(t)
	for _, args := range [][]string{{"tenant", "rm", "acme/gateways/acme-gw"}, {"gateway", "rm", "acme", "acme-gw?x=1"}} {
		if code, _, errOut := runCmd(t, append([]string{"admin", "-url", srv.URL}, args...)...); code != 1 || !strings.Contains(errOut, "404") {
			t.Errorf("admin %s: exit %d, stderr %q; want 404", strings.Join(args, " "), code, errOut)
		}
	}
	if ok, err := reg.GatewayOf(context.Background(), "acme", "acme-gw"); err != nil || !ok {
		t.Fatalf("acme-gw is gone (%v): a command naming another resource deleted it", err)
	}
}

// TestAdminBackupGivesUpOnASilentPeer: `admin backup` against a peer that
// takes the connection and never answers gives up after backupHeaderWait,
// and against one that answers headers and then stops sending, once
// adminWait passes without more bytes, instead of waiting forever.
func TestAdminBackupGivesUpOnASilentPeer(t *testing.T) {
	defer func(w, h time.Duration) { adminWait, backupHeaderWait = w, h }(adminWait, backupHeaderWait)
	adminWait, backupHeaderWait = 200*time.Millisecond, 300*time.Millisecond
	t.Setenv(envAdminToken, adminToken)
	for name, tc := range map[string]struct{ answer, want string }{
		"no answer":      {"", "no answer after 300ms"},
		"stalled stream": {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", "no progress for 200ms"},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conns := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096)) // the request
			_, _ = c.Write([]byte(tc.answer))
			conns <- c // held open, silent
		}()
		type result struct {
			code   int
			errOut string
		}
		done := make(chan result, 1)
		go func() {
			code, _, errOut := runCmd(t, "admin", "-url", "http://"+ln.Addr().String(), "backup", "-o", t.TempDir()+"/b.db")
			done <- result{code, errOut}
		}()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.errOut, tc.want) {
				t.Errorf("%s: exit %d, stderr %q", name, r.code, r.errOut)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: admin backup still waiting after 30s on a silent peer", name)
		}
		ln.Close()
		select {
		case c := <-conns:
			c.Close()
		case <-time.After(serveWait):
			t.Errorf("%s: timed out after %v waiting for the peer to take the request", name, serveWait)
		}
	}
}

// TestAdminCLISessionResetIsExplicit: "session TENANT" with no setting is
// refused with the usage and changes nothing, as it would put every
// setting back to its default; "session TENANT -reset" does that on
// purpose, and KEY=VALUE still sets.
func TestAdminCLISessionResetIsExplicit(t *testing.T) {
	reg, srv := adminCLIRig(t)
	session := func() *registry.Session {
		t.Helper()
		s, err := reg.Stored(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range s.Tenants {
			if tn.ID == "acme" {
				return tn.Session
			}
		}
		t.Fatal("acme is gone")
		return nil
	}
	admin := func(args ...string) (int, string) {
		t.Helper()
		code, _, errOut := runCmd(t, append([]string{"admin", "-url", srv.URL, "session"}, args...)...)
		return code, errOut
	}
	if code, errOut := admin("acme", "profile=lab", "group_sessions_per_user=false"); code != 0 {
		t.Fatalf("session acme profile=lab ...: exit %d, stderr %q", code, errOut)
	}
	if s := session(); s == nil || s.Profile != "lab" || s.GroupSessionsPerUser == nil || *s.GroupSessionsPerUser {
		t.Fatalf("after setting, acme's session is %+v", s)
	}
	if code, errOut := admin("acme"); code != 2 || !strings.Contains(errOut, "-reset") || !strings.Contains(errOut, "subcommands:") {
		t.Fatalf("session acme: exit %d, stderr %q; want refused with the usage", code, errOut)
	}
	if s := session(); s == nil || s.Profile != "lab" {
		t.Fatalf("a refused session acme changed the settings to %+v", s)
	}
	if code, errOut := admin("acme", "-reset", "profile=x"); code != 2 {
		t.Fatalf("session acme -reset profile=x: exit %d, stderr %q; want refused", code, errOut)
	}
	if code, errOut := admin("acme", "-reset"); code != 0 {
		t.Fatalf("session acme -reset: exit %d, stderr %q", code, errOut)
	}
	if s := session(); s != nil && (s.Profile != "" || s.GroupSessionsPerUser != nil) {
		t.Fatalf("after -reset, acme's session is %+v", s)
	}
}

// TestAdminCLIAnswerCutShortFails: an answer whose body ends before its
// Content-Length (the connector stopped, the connection broke) is a
// failure, not printed as if whole with exit 0; for gateway add the
// secret it would have carried is lost, and the operator must know.
func TestAdminCLIAnswerCutShortFails(t *testing.T) {
	t.Setenv(envAdminToken, adminToken)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096)) // the request
			_, _ = c.Write([]byte("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\": \"gw\", \"sec"))
			c.Close()
		}
	}()
	for _, args := range [][]string{{"tenants"}, {"gateway", "add", "acme", "gw"}} {
		code, out, errOut := runCmd(t, append([]string{"admin", "-url", "http://" + ln.Addr().String()}, args...)...)
		if code != 1 || !strings.Contains(errOut, "cut short") {
			t.Errorf("admin %s: exit %d, stdout %q, stderr %q; want exit 1 saying the answer was cut short", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestAdminCLIPrintsALongAnswerWhole: an answer longer than the CLI
// indents (a listing of many tenants, gateways and user links) was cut at
// 16 MiB and printed, invalid, with exit 0; it is now printed whole, as
// the connector sent it.
func TestAdminCLIPrintsALongAnswerWhole(t *testing.T) {
	t.Setenv(envAdminToken, adminToken)
	names := make([]string, 1<<20) // 18 MiB of JSON
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%07d", i)
	}
	answer, _ := json.Marshal(map[string][]string{"tenants": names})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	code, out, errOut := runCmd(t, "admin", "-url", srv.URL, "tenants")
	var got map[string][]string
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got["tenants"]) != len(names) {
		t.Fatalf("exit %d, %d bytes printed of %d (%v), stderr %q", code, len(out), len(answer), err, errOut)
	}
}

// TestAdminCLIChangeWithoutAnswerMayHaveBeenMade: a change whose answer
// does not come within adminWait (the connector took the request and
// stalled, or the answer was lost) may have been made: the CLI says so,
// as it does for an answer cut short, so that a gateway add is not run
// again blindly (409) with its secret lost; a listing's timeout does not.
func TestAdminCLIChangeWithoutAnswerMayHaveBeenMade(t *testing.T) {
	t.Setenv(envAdminToken, adminToken)
	defer func(w time.Duration) { adminWait = w }(adminWait)
	adminWait = 200 * time.Millisecond
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	code, _, errOut := runCmd(t, "admin", "-url", srv.URL, "gateway", "add", "acme", "gw")
	if code != 1 || !strings.Contains(errOut, "the change may have been made") {
		t.Errorf("gateway add without an answer: exit %d, stderr %q; want exit 1 saying the change may have been made", code, errOut)
	}
	if code, _, errOut := runCmd(t, "admin", "-url", srv.URL, "tenants"); code != 1 || strings.Contains(errOut, "may have been made") {
		t.Errorf("tenants without an answer: exit %d, stderr %q", code, errOut)
	}
}

// TestAdminCLIChangeNeverSentIsNotSaidToBeMade: a change whose request
// never reached the connector (its TLS certificate refused, so nothing was
// sent) was said to be maybe made, as for a change sent and unanswered.
func TestAdminCLIChangeNeverSentIsNotSaidToBeMade(t *testing.T) {
	t.Setenv(envAdminToken, adminToken)
	srv := httptest.NewTLSServer(http.NotFoundHandler()) // a certificate the CLI does not trust
	defer srv.Close()
	code, _, errOut := runCmd(t, "admin", "-url", srv.URL, "gateway", "add", "acme", "gw")
	if code != 1 || strings.Contains(errOut, "may have been made") {
		t.Errorf("gateway add never sent: exit %d, stderr %q; want exit 1 not saying the change may have been made", code, errOut)
	}
}
