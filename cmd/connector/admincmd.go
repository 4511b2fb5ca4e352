package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connector/admin"
)

// Environment of the admin CLI.
const (
	envAdminURL   = "CONNECTOR_ADMIN_URL"
	envAdminToken = "CONNECTOR_ADMIN_TOKEN"
)

// defaultAdminURL is where the admin CLI looks without -url or
// $CONNECTOR_ADMIN_URL.
const defaultAdminURL = "http://127.0.0.1:9091"

// adminWait bounds an admin request: its whole exchange, or for a backup,
// which may take long, each wait for more of the copy (tests lower it).
var adminWait = 30 * time.Second

// adminUsage lists the admin CLI's subcommands.
const adminUsage = `subcommands:
  tenants                                  list tenants, their gateways (no secrets) and bindings
  tenant add TENANT                        create a tenant
  tenant rm TENANT                         delete a tenant, its gateways (sockets closed 4401), bindings and unredeemed tokens
  tenant max-gateways TENANT N             bound the tenant's gateways (0: the default, 100)
  gateway add TENANT GATEWAY               create a gateway; prints its secret, shown once
  gateway rotate TENANT GATEWAY [GRACE]    new secret; the old ones stay valid for GRACE (default 1h; 0s: end now)
  gateway rm TENANT GATEWAY                delete a gateway: its sockets close 4401, later upgrades are refused
  gateway wake TENANT GATEWAY [URL]        set the gateway's wake URL (http/https), poked when inbound waits for it;
                                           without URL: remove it
  enroll-token TENANT [TTL]                a single-use token for hermes gateway enroll (TTL default and at most 24h), shown once
  bind TENANT PLATFORM KIND ID             route to the tenant: discord guild, telegram chat, nexscope room; on discord
                                           and telegram also user (link), scope (claim), dm_default, allow, principal
                                           (ID owner-only, allow-list or any)
  unbind TENANT PLATFORM KIND ID           remove that route
  session TENANT KEY=VALUE...              set the session settings: group_sessions_per_user, thread_sessions_per_user
                                           (true/false), profile, nexscope_key_platform (relay/nexscope); those
                                           not given take their defaults
  session TENANT -reset                    put every session setting back to its default
  backup -o FILE [-data-dir DIR]           copy the embedded store's data file while the connector runs; with
                                           -data-dir, copy DIR's file directly while no connector runs there`

// adminCmd drives the admin API of a running connector.
func adminCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("admin", "connector admin [-url URL] SUBCOMMAND ARGS...",
		"Changes tenants, gateways, secrets and bindings of a running connector through its admin API.\n"+
			"The token is read from $"+envAdminToken+".\n\n"+adminUsage)
	url := fs.String("url", "", "the admin listener (default $"+envAdminURL+", else "+defaultAdminURL+")")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	base := strings.TrimSuffix(cmp.Or(*url, os.Getenv(envAdminURL), defaultAdminURL), "/")
	if fs.Arg(0) == "backup" {
		return adminBackup(base, fs.Args()[1:], stdout, stderr)
	}
	token := os.Getenv(envAdminToken)
	if token == "" {
		fmt.Fprintf(stderr, "connector admin: set %s to the admin token\n", envAdminToken)
		return 2
	}
	req, err := adminRequest(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "connector admin: %v\n\n%s\n", err, adminUsage)
		return 2
	}
	return adminDo(base, token, req, stdout, stderr)
}

// adminCall is one admin API request.
type adminCall struct {
	method, path string
	body         any
	// secret is set for calls that answer a new secret, printed as
	// environment lines for the gateway.
	secret bool
	// enrollToken is set for a call that answers an enrollment token,
	// printed as the environment line hermes gateway enroll reads.
	enrollToken bool
	// endsPrevious is set for a rotation with no grace: the previous
	// secrets end at once.
	endsPrevious bool
}

// adminRequest turns the command line into a request.
func adminRequest(args []string) (adminCall, error) {
	n := func(want int) error {
		if len(args) != want {
			return fmt.Errorf("%s: want %d arguments, got %d", strings.Join(args[:min(2, len(args))], " "), want-1, len(args)-1)
		}
		return nil
	}
	if len(args) == 0 {
		return adminCall{}, fmt.Errorf("no subcommand")
	}
	tenants := "/admin/v1/tenants"
	sub := args[0]
	if len(args) > 1 && (sub == "tenant" || sub == "gateway") {
		sub += " " + args[1]
		args = args[1:]
	}
	tenant := tenants + "/" + url.PathEscape(at(args, 1)) // an id is one path segment
	gateway := tenant + "/gateways/" + url.PathEscape(at(args, 2))
	// optional is the count check of a subcommand whose last argument,
	// the want-th, may be left out.
	optional := func(want int) error {
		if len(args) == want {
			return nil
		}
		return n(want - 1)
	}
	switch sub {
	case "tenants":
		return adminCall{method: http.MethodGet, path: tenants}, n(1)
	case "tenant add":
		return adminCall{method: http.MethodPost, path: tenants, body: map[string]string{"id": at(args, 1)}}, n(2)
	case "tenant rm":
		return adminCall{method: http.MethodDelete, path: tenant}, n(2)
	case "tenant max-gateways":
		if len(args) != 3 {
			return adminCall{}, n(3)
		}
		limit, err := strconv.Atoi(args[2])
		if err != nil {
			return adminCall{}, fmt.Errorf("max gateways %q: want a number", args[2])
		}
		return adminCall{method: http.MethodPut, path: tenant + "/max-gateways", body: map[string]int{"max_gateways": limit}}, nil
	case "gateway add":
		return adminCall{method: http.MethodPost, path: tenant + "/gateways", body: map[string]string{"id": at(args, 2)}, secret: true}, n(3)
	case "gateway rotate":
		c := adminCall{method: http.MethodPost, path: gateway + "/rotate", secret: true}
		if len(args) == 4 {
			grace, err := time.ParseDuration(args[3])
			if err != nil {
				return adminCall{}, fmt.Errorf("grace %q: want a duration such as 10m", args[3])
			}
			c.body, c.endsPrevious = map[string]string{"grace": args[3]}, grace == 0
		}
		return c, optional(4)
	case "gateway rm":
		return adminCall{method: http.MethodDelete, path: gateway}, n(3)
	case "gateway wake":
		return adminCall{method: http.MethodPut, path: gateway + "/wake", body: map[string]string{"url": at(args, 3)}}, optional(4)
	case "enroll-token":
		c := adminCall{method: http.MethodPost, path: tenant + "/enroll-tokens", enrollToken: true}
		if len(args) == 3 {
			if _, err := time.ParseDuration(args[2]); err != nil {
				return adminCall{}, fmt.Errorf("ttl %q: want a duration such as 24h", args[2])
			}
			c.body = map[string]string{"ttl": args[2]}
		}
		return c, optional(3)
	case "bind", "unbind":
		method := http.MethodPut
		if sub == "unbind" {
			method = http.MethodDelete
		}
		return adminCall{method: method, path: tenant + "/bindings",
			body: map[string]string{"platform": at(args, 2), "kind": at(args, 3), "id": at(args, 4)}}, n(5)
	case "session":
		// With no setting the PUT would put every one back to its
		// default: only on purpose, with -reset alone.
		reset := len(args) == 3 && args[2] == "-reset"
		if len(args) < 3 || (!reset && slices.Contains(args[2:], "-reset")) {
			return adminCall{}, fmt.Errorf("session: want TENANT KEY=VALUE..., or TENANT -reset to put every setting back to its default")
		}
		body := map[string]any{}
		if reset {
			args = args[:2]
		}
		for _, kv := range args[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return adminCall{}, fmt.Errorf("session: %q is not KEY=VALUE", kv)
			}
			switch k {
			case "group_sessions_per_user", "thread_sessions_per_user":
				b, err := strconv.ParseBool(v)
				if err != nil {
					return adminCall{}, fmt.Errorf("session: %s: %q is not true or false", k, v)
				}
				body[k] = b
			case "profile", "nexscope_key_platform":
				body[k] = v
			default:
				return adminCall{}, fmt.Errorf("session: unknown setting %q", k)
			}
		}
		return adminCall{method: http.MethodPut, path: tenant + "/session", body: body}, nil
	}
	return adminCall{}, fmt.Errorf("unknown subcommand %q", strings.Join(args, " "))
}

// at is args[i], or "" past its end (the count check reports it).
func at(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

// newAdminRequest is an admin API request carrying token, and the local
// user as the actor.
func newAdminRequest(ctx context.Context, method, url, token string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err == nil {
		req.Header.Set("Authorization", "Bearer "+token)
		if u, uerr := user.Current(); uerr == nil {
			req.Header.Set(admin.ActorHeader, u.Username)
		}
	}
	return req, err
}

// answerError is a failed admin answer: its status and its {"error"} (or
// its body).
func answerError(resp *http.Response, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	return fmt.Errorf("%s: %s", resp.Status, cmp.Or(e.Error, strings.TrimSpace(string(data))))
}

// unreachable explains a request to the admin listener at base that got
// no answer: nothing listening there is the common case (the admin API is
// off unless admin.listen is set, or -url is not its address).
func unreachable(base string, err error) error {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return fmt.Errorf("nothing listens at %s: the admin API is off unless the connector's config sets admin.listen "+
		"(and admin.token or $%s); give its address (the banner's admin: line) with -url or $%s", base, envAdminToken, envAdminURL)
}

// maxIndented bounds the answers adminDo indents; a longer one (a listing
// of many tenants) is printed as it comes.
const maxIndented = 16 << 20

// adminDo sends req and prints the answer.
func adminDo(base, token string, c adminCall, stdout, stderr io.Writer) int {
	var body io.Reader
	if c.body != nil {
		data, _ := json.Marshal(c.body)
		body = bytes.NewReader(data)
	}
	req, err := newAdminRequest(context.Background(), c.method, base+c.path, token, body)
	if err != nil {
		fmt.Fprintf(stderr, "connector admin: %v\n", err)
		return 2
	}
	req.Header.Set("Content-Type", "application/json")
	var sent atomic.Bool // the request reached the connector whole
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.CompareAndSwap(false, i.Err == nil) }}))
	resp, err := (&http.Client{Timeout: adminWait}).Do(req)
	if err != nil {
		if c.method != http.MethodGet && sent.Load() { // no answer
			err = fmt.Errorf("%w; the change may have been made: check with connector admin tenants", err)
		}
		fmt.Fprintf(stderr, "connector admin: %v\n", unreachable(base, err))
		return 1
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxIndented+1))
	if len(data) > maxIndented && err == nil && resp.StatusCode < 300 { // too long to indent: printed as it comes
		_, _ = stdout.Write(data)
		_, err = io.Copy(stdout, resp.Body)
	}
	if err != nil { // e.g. a secret the answer was to carry is lost
		fmt.Fprintf(stderr, "connector admin: %s: the answer was cut short (%v); the change may have been made: check with connector admin tenants\n", resp.Status, err)
		return 1
	}
	if resp.StatusCode >= 300 {
		fmt.Fprintf(stderr, "connector admin: %v\n", answerError(resp, data))
		return 1
	}
	if c.secret {
		var s struct {
			ID                 string `json:"id"`
			Secret             string `json:"secret"`
			PreviousValidUntil string `json:"previous_valid_until"`
		}
		_ = json.Unmarshal(data, &s)
		fmt.Fprintf(stdout, "GATEWAY_RELAY_ID=%s\nGATEWAY_RELAY_SECRET=%s\n", s.ID, s.Secret)
		switch {
		case c.endsPrevious:
			fmt.Fprintln(stderr, "the previous secrets are no longer valid: the sockets that authenticated with one are closed (4401 revoked) and an upgrade signed with one is refused (4401)")
		case s.PreviousValidUntil != "":
			fmt.Fprintf(stderr, "the previous secrets stay valid until %s\n", s.PreviousValidUntil)
		}
		return 0
	}
	if c.enrollToken {
		var e struct{ Token, Expires string }
		_ = json.Unmarshal(data, &e)
		fmt.Fprintf(stdout, "GATEWAY_RELAY_ENROLL_TOKEN=%s\n", e.Token)
		fmt.Fprintf(stderr, "single use, valid until %s: hermes gateway enroll --token <it> --connector-url <this connector's /relay URL>\n", e.Expires)
		return 0
	}
	if len(data) > 0 && len(data) <= maxIndented {
		var out bytes.Buffer
		if json.Indent(&out, data, "", "  ") == nil {
			data = out.Bytes()
		}
		_, _ = stdout.Write(data)
	}
	return 0
}
