package media

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// tokens is an Authenticator: a header "Bearer <token>" maps to a tenant.
type tokens map[string]string

func (t tokens) Authenticate(h string) (string, string, []byte, error) {
	if tenant, ok := t[strings.TrimPrefix(h, "Bearer ")]; ok && strings.HasPrefix(h, "Bearer ") {
		return tenant, "gw-" + tenant, nil, nil
	}
	return "", "", nil, errors.New("bad token")
}

func newStore(t *testing.T, cfg Config) (*Store, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Clock = clk
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, clk
}

// TestSecondStoreOnOneDirectoryIsRefused: a second store on a directory a
// live store uses (two instances on one host sharing a data directory)
// fails to start, saying why, instead of removing the live store's
// objects; once the first is closed (or its process ends) a new one
// starts there.
func TestSecondStoreOnOneDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, _ := newStore(t, Config{Dir: dir})
	info, err := first.Put("t1", strings.NewReader("live"), "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	if second, err := New(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another") {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second store on %s: err = %v, want refused as in use", dir, err)
	}
	obj, err := first.Open("t1", info.ID)
	if err != nil {
		t.Fatalf("after the second store was refused, the first's object: %v", err)
	}
	obj.Close()
	first.Close()
	newStore(t, Config{Dir: dir})
}

func TestPutOpenTenantAndExpiry(t *testing.T) {
	s, clk := newStore(t, Config{TTL: time.Hour})
	info, err := s.Put("t1", strings.NewReader("hello"), "text/plain", "../../etc/a\"b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !ValidID(info.ID) || info.Size != 5 || info.Filename != "ab.txt" {
		t.Fatalf("info = %+v", info)
	}
	if _, err := s.Open("t2", info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's id: err = %v, want ErrNotFound", err)
	}
	obj, err := s.Open("t1", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(obj.Section())
	obj.Close()
	if string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
	clk.Advance(time.Hour)
	if _, err := s.Open("t1", info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired id: err = %v, want ErrNotFound", err)
	}
	if total, _ := s.usage("t1"); total != 0 {
		t.Fatalf("expired object still counted: %d bytes", total)
	}
	if _, err := s.Open("t1", "not-an-id"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("malformed id: err = %v", err)
	}
}

func TestLimitsAndQuota(t *testing.T) {
	s, clk := newStore(t, Config{MaxBytes: 10, QuotaBytes: 25, TenantQuotaBytes: 15, TTL: time.Minute})
	if _, err := s.Put("t1", strings.NewReader(strings.Repeat("x", 11)), "", ""); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("11 bytes over a 10-byte limit: err = %v", err)
	}
	if total, _ := s.usage("t1"); total != 0 {
		t.Fatalf("refused upload left %d bytes counted", total)
	}
	if _, err := s.Put("t1", strings.NewReader("0123456789"), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("t1", strings.NewReader("012345"), "", ""); !errors.Is(err, ErrQuota) {
		t.Fatalf("past the tenant quota: err = %v", err)
	}
	if _, err := s.Put("t2", strings.NewReader("0123456789"), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("t3", strings.NewReader("0123456789"), "", ""); !errors.Is(err, ErrQuota) {
		t.Fatalf("past the store quota: err = %v", err)
	}
	clk.Advance(time.Minute) // the expired objects make room
	if _, err := s.Put("t3", strings.NewReader("0123456789"), "", ""); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	entries, _ := os.ReadDir(s.cfg.Dir)
	if len(entries) != 1 {
		t.Fatalf("%d files on disk, want 1", len(entries))
	}
}

func TestNewRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	s, _ := newStore(t, Config{Dir: dir})
	if _, err := s.Put("t1", strings.NewReader("x"), "", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/keep.txt", []byte("not ours"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Close() // the previous process's store
	newStore(t, Config{Dir: dir})
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "keep.txt" {
		t.Fatalf("after New: %v", entries)
	}
}

func TestParseRef(t *testing.T) {
	s, _ := newStore(t, Config{PublicURL: "https://c.example:8443/"})
	id := strings.Repeat("ab", 16)
	for _, tc := range []struct {
		url  string
		ok   bool
		want string
	}{
		{"https://c.example:8443/relay/media/" + id, true, id},
		{"https://C.EXAMPLE:8443/relay/media/" + id, true, id},
		{"https://c.example/relay/media/" + id, false, ""},
		{"http://c.example:8443/relay/media/" + id, false, ""},
		{"https://c.example:8443/relay/media/zz", true, "zz"},
		{"https://cdn.example/a.png", false, ""},
	} {
		got, ok := s.ParseRef(tc.url)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseRef(%q) = %q, %v; want %q, %v", tc.url, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRefUnderBasePath(t *testing.T) {
	s, _ := newStore(t, Config{PublicURL: "https://c.example/connector"})
	id := strings.Repeat("cd", 16)
	if got, ok := s.ParseRef("https://c.example/connector/relay/media/" + id); !ok || got != id {
		t.Errorf("under the base path: %q %v", got, ok)
	}
	if _, ok := s.ParseRef("https://c.example/relay/media/" + id); ok {
		t.Error("outside the base path read as a reference")
	}
	if u := s.URL(id); u != "https://c.example/connector/relay/media/"+id {
		t.Errorf("URL = %s", u)
	}
}

func TestResolveRefusesPrivateAddresses(t *testing.T) {
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret")) }))
	defer src.Close()
	s, _ := newStore(t, Config{})
	if _, err := s.Resolve(context.Background(), "t1", src.URL+"/x.png"); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("loopback source_url: err = %v, want ErrForbiddenAddress", err)
	}
	if _, err := s.Resolve(context.Background(), "t1", "file:///etc/passwd"); !errors.Is(err, ErrBadURL) {
		t.Fatalf("file URL: err = %v", err)
	}
}

func TestResolveDownloadsTemporaryObject(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(body)
	}))
	defer src.Close()
	s, _ := newStore(t, Config{AllowPrivateURLs: true})
	obj, err := s.Resolve(context.Background(), "t1", src.URL+"/dir/pic.png")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj.Section())
	if !bytes.Equal(got, body) || obj.MIME != "image/png" || obj.Filename != "pic.png" {
		t.Fatalf("object %+v, %d bytes", obj.Info, len(got))
	}
	obj.Close()
	if total, _ := s.usage("t1"); total != 0 {
		t.Fatalf("temporary object kept after Close: %d bytes", total)
	}
	var fe *FetchError
	if _, err := s.Resolve(context.Background(), "t1", src.URL+"/missing"); !errors.As(err, &fe) || fe.Status != 404 {
		t.Fatalf("404 source: err = %v", err)
	}
	if strings.Contains(fe.Error(), "127.0.0.1") {
		t.Fatalf("error names the address: %v", fe)
	}
}

func TestHandler(t *testing.T) {
	s, clk := newStore(t, Config{MaxBytes: 1 << 20, PublicURL: "http://c.example"})
	srv := httptest.NewServer(httpMux(s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1", "tok2": "t2"}})))
	defer srv.Close()
	do := func(method, path, token string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	data := bytes.Repeat([]byte{0, 1, 2, 250}, 100_000)
	resp, b := do("POST", "/relay/media", "tok1", bytes.NewReader(data), map[string]string{"Content-Type": "image/png", "X-Media-Filename": "p.png"})
	if resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	var up struct {
		ID   string
		Size int64
		URL  string
	}
	if err := json.Unmarshal(b, &up); err != nil || up.Size != int64(len(data)) || up.URL != "http://c.example/relay/media/"+up.ID {
		t.Fatalf("upload answer %s (%v)", b, err)
	}

	resp, b = do("GET", "/relay/media/"+up.ID, "tok1", nil, nil)
	if resp.StatusCode != 200 || sha256.Sum256(b) != sha256.Sum256(data) || resp.Header.Get("Content-Type") != "image/png" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename=p.png` {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, len(b), resp.Header)
	}

	for _, tc := range []struct {
		name, method, path, token string
		body                      io.Reader
		want                      int
	}{
		{"no bearer", "GET", "/relay/media/" + up.ID, "", nil, 401},
		{"wrong bearer", "GET", "/relay/media/" + up.ID, "nope", nil, 401},
		{"wrong bearer upload", "POST", "/relay/media", "nope", strings.NewReader("x"), 401},
		{"another tenant's id", "GET", "/relay/media/" + up.ID, "tok2", nil, 404},
		{"malformed id", "GET", "/relay/media/..%2fetc", "tok1", nil, 404},
		{"unknown id", "GET", "/relay/media/" + strings.Repeat("0", 32), "tok1", nil, 404},
		{"over the limit", "POST", "/relay/media", "tok1", bytes.NewReader(make([]byte, 1<<20+1)), 413},
		{"over the limit, chunked", "POST", "/relay/media", "tok1", io.MultiReader(strings.NewReader("x"), bytes.NewReader(make([]byte, 1<<20))), 413},
		{"empty", "POST", "/relay/media", "tok1", strings.NewReader(""), 400},
		{"wrong method", "DELETE", "/relay/media/" + up.ID, "tok1", nil, 405},
	} {
		resp, b := do(tc.method, tc.path, tc.token, tc.body, nil)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, b, tc.want)
		}
	}
	clk.Advance(DefaultTTL)
	if resp, b := do("GET", "/relay/media/"+up.ID, "tok1", nil, nil); resp.StatusCode != 404 {
		t.Fatalf("expired id: %d %s", resp.StatusCode, b)
	}
}

func httpMux(h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	for p, h := range Routes(h) {
		mux.Handle(p, h)
	}
	return mux
}

// TestResolveRefusesPrivateIPv4InsideIPv6 checks that an IPv6 address
// carrying an IPv4 one (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16) is judged by that IPv4 address: on a network with a NAT64
// gateway, http://[64:ff9b::a9fe:a9fe]/ reaches 169.254.169.254.
func TestResolveRefusesPrivateIPv4InsideIPv6(t *testing.T) {
	s, _ := newStore(t, Config{})
	for _, host := range []string{
		"[64:ff9b::7f00:1]",      // NAT64 of 127.0.0.1
		"[64:ff9b::a9fe:a9fe]",   // NAT64 of 169.254.169.254
		"[64:ff9b:1::a00:1]",     // local-use NAT64 of 10.0.0.1
		"[2002:c0a8:101::1]",     // 6to4 of 192.168.1.1
		"[2002:7f00:1::1]",       // 6to4 of 127.0.0.1
		"[::ffff:10.1.2.3]",      // IPv4-mapped
		"[64:ff9b::c0a8:1]:8080", // NAT64 of 192.168.0.1, with a port
		"[::7f00:1]",             // IPv4-compatible 127.0.0.1 (deprecated)
		"[::a9fe:a9fe]",          // IPv4-compatible 169.254.169.254
		"[fec0::1]",              // site-local (deprecated, private)
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.Resolve(ctx, "t1", "http://"+host+"/x.png")
		cancel()
		if !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s: err = %v, want ErrForbiddenAddress", host, err)
		}
	}
	for _, a := range []string{"64:ff9b::808:808", "2002:808:808::1", "2001:4860:4860::8888"} {
		if !publicAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s (a public IPv4 inside, or plain public IPv6) refused", a)
		}
	}
}

// TestDownloadIsAlwaysAnAttachment checks that an object uploaded without
// a filename is still served as an attachment (docs/contract.md), so an
// uploaded text/html or image/svg+xml is never rendered by a browser on
// the connector's origin.
func TestDownloadIsAlwaysAnAttachment(t *testing.T) {
	s, _ := newStore(t, Config{})
	srv := httptest.NewServer(httpMux(s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1"}})))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/relay/media", strings.NewReader("<script>alert(document.domain)</script>"))
	req.Header.Set("Authorization", "Bearer tok1")
	req.Header.Set("Content-Type", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var up struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %d %v", resp.StatusCode, err)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/relay/media/"+up.ID, nil)
	req.Header.Set("Authorization", "Bearer tok1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cd := resp.Header.Get("Content-Disposition"); resp.StatusCode != 200 || cd != "attachment" {
		t.Fatalf("download: %d, Content-Disposition %q, want attachment", resp.StatusCode, cd)
	}
}

// TestResolveFollowsAtMostFiveRedirects checks docs/security.md's "at most
// 5" redirects: a source five redirects away is downloaded, one six away
// is not.
func TestResolveFollowsAtMostFiveRedirects(t *testing.T) {
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		if _, err := fmt.Sscanf(r.URL.Path, "/r/%d", &n); err == nil && n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("payload"))
	}))
	defer src.Close()
	s, _ := newStore(t, Config{AllowPrivateURLs: true})
	obj, err := s.Resolve(context.Background(), "t1", src.URL+"/r/5")
	if err != nil {
		t.Fatalf("five redirects: %v", err)
	}
	obj.Close()
	if _, err := s.Resolve(context.Background(), "t1", src.URL+"/r/6"); err == nil {
		t.Fatal("six redirects followed")
	}
}

// TestUploadStoreFailureIsAServerError checks that an upload the store
// cannot write (here its directory is gone; in production a full disk) is
// answered 500, not the 400 of a bad body a gateway would not retry.
func TestUploadStoreFailureIsAServerError(t *testing.T) {
	dir := t.TempDir() + "/media"
	s, _ := newStore(t, Config{Dir: dir})
	srv := httptest.NewServer(httpMux(s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1"}})))
	defer srv.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/relay/media", strings.NewReader("payload"))
	req.Header.Set("Authorization", "Bearer tok1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(b), dir) {
		t.Fatalf("upload to a store that cannot write: %d %s, want 500 without the path", resp.StatusCode, b)
	}
}

// TestSweepRemovesAbandonedUpload: an upload begun and never ended is
// removed by the sweep once it is older than the TTL (and the upload
// timeout), its bytes released and its file gone; its later writes and
// commit fail. A younger one stays.
func TestSweepRemovesAbandonedUpload(t *testing.T) {
	dir := t.TempDir()
	s, clk := newStore(t, Config{Dir: dir, TTL: time.Minute, UploadTimeout: 2 * time.Minute})
	old, err := s.Begin("t1", "text/plain", "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	young, err := s.Begin("t1", "text/plain", "b.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer young.Abort()
	if _, err := young.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if total, _ := s.usage("t1"); total != 13 {
		t.Fatalf("after a sweep at 1m: %d bytes in use; want 13 (no upload is older than the 2m upload timeout)", total)
	}
	clk.Advance(time.Minute)
	s.Sweep()
	if total, ofTenant := s.usage("t1"); total != 3 || ofTenant != 3 {
		t.Fatalf("after a sweep at 2m: %d bytes in use (%d of t1); want the young upload's 3", total, ofTenant)
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("after the sweep %d files remain; want the young upload's only", len(files))
	}
	if _, err := old.Write([]byte("x")); err == nil {
		t.Error("a write to the swept upload succeeded")
	}
	if _, err := old.Commit(); err == nil {
		t.Error("the swept upload committed")
	}
	if total, _ := s.usage("t1"); total != 3 {
		t.Fatalf("after the swept upload's write and commit: %d bytes in use; want 3", total)
	}
}

// TestParseRefPorts: a port is compared as the port it dials: the
// scheme's default port, written or not (or written empty), is the same
// origin, and a port out of range or another port is not a reference.
// A public URL with a malformed port is refused.
func TestParseRefPorts(t *testing.T) {
	id := strings.Repeat("ef", 16)
	for _, tc := range []struct {
		public, url string
		ok          bool
	}{
		{"https://c.example", "https://c.example:443/relay/media/" + id, true},
		{"https://c.example", "https://c.example:/relay/media/" + id, true},
		{"https://c.example:443", "https://c.example/relay/media/" + id, true},
		{"http://c.example", "http://c.example:80/relay/media/" + id, true},
		{"https://c.example:8443", "https://c.example:08443/relay/media/" + id, true},
		{"https://c.example", "https://c.example:8443/relay/media/" + id, false},
		{"https://c.example", "http://c.example:443/relay/media/" + id, false},
		{"https://c.example:8443", "https://c.example:8443000/relay/media/" + id, false},
		{"https://c.example:8443", "https://c.example:74979/relay/media/" + id, false}, // 8443 modulo 65536
		{"https://[::1]:8443", "https://[0::1]:8443/relay/media/" + id, true},
	} {
		s, _ := newStore(t, Config{PublicURL: tc.public})
		got, ok := s.ParseRef(tc.url)
		if ok != tc.ok || (ok && got != id) {
			t.Errorf("public %s: ParseRef(%q) = %q, %v; want ok=%v", tc.public, tc.url, got, ok, tc.ok)
		}
	}
	for _, public := range []string{"https://c.example:", "https://c.example:65536", "https://c.example:0", "https://c.example:+1"} {
		if err := (Config{PublicURL: public}).Validate(); err == nil {
			t.Errorf("public_url %q accepted", public)
		}
	}
}

// TestObjectCountIsBounded: one-byte objects cannot fill memory and the
// disk's inodes under a byte quota: past the tenant's or the store's
// object count an upload is refused as over quota (507), an expired
// object is removed first to make room, and nothing is left on disk.
func TestObjectCountIsBounded(t *testing.T) {
	if maxTenantObjects != 1<<14 || maxObjects != 1<<16 {
		t.Fatalf("bounds %d per tenant, %d in all; docs/security.md says 16384 and 65536", maxTenantObjects, maxObjects)
	}
	dir := t.TempDir()
	s, clk := newStore(t, Config{Dir: dir, TTL: time.Minute})
	s.maxTenantObjects, s.maxObjects = 2, 3
	put := func(tenant string) error {
		_, err := s.Put(tenant, strings.NewReader("x"), "", "")
		return err
	}
	for _, tenant := range []string{"t1", "t1", "t2"} {
		if err := put(tenant); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("t1"); !errors.Is(err, ErrQuota) {
		t.Fatalf("t1's third object: err = %v, want ErrQuota", err)
	}
	if err := put("t3"); !errors.Is(err, ErrQuota) {
		t.Fatalf("the store's fourth object: err = %v, want ErrQuota", err)
	}
	srv := httptest.NewServer(s.Handler(HandlerConfig{Auth: tokens{"tok": "t3"}}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/relay/media", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Fatalf("an upload past the object count: %d, want 507", resp.StatusCode)
	}
	if files, _ := os.ReadDir(dir); len(files) != 3 {
		t.Fatalf("%d files on disk; want the 3 stored objects", len(files))
	}
	clk.Advance(time.Minute)
	if err := put("t3"); err != nil {
		t.Fatalf("after the objects expired: %v", err)
	}
}

// TestStoreInAnotherProcessHoldsItsDirectory: a store opened by another
// process (this test binary run again, standing in for a second instance)
// refuses one here on the same directory; once that process is killed
// (SIGKILL: no Close) the directory is free and a store starts there.
func TestStoreInAnotherProcessHoldsItsDirectory(t *testing.T) {
	if dir := os.Getenv("MEDIA_TEST_HOLD_DIR"); dir != "" {
		if _, err := New(Config{Dir: dir}); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("holding")
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed, or the test's end closes stdin
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreInAnotherProcessHoldsItsDirectory$")
	cmd.Env = append(os.Environ(), "MEDIA_TEST_HOLD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n') // ends when the child exits, if it does
	if line != "holding\n" {
		t.Fatalf("the other process did not open its store: %q %v", line, err)
	}
	if s, err := New(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another connector") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a store beside another process's: err = %v, want refused as in use", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	newStore(t, Config{Dir: dir})
}

// TestSetTenantsRemovesADeletedTenantsObjects: the objects, stored and in
// progress, of a stored tenant deleted, or made again under its id
// (another creation time), are removed at once rather than at their
// expiry, so a tenant made again under the id never fetches the earlier
// one's; an unchanged tenant, a declared one (zero creation time) even
// dropped from the YAML, and a stored one the YAML now declares keep
// theirs.
func TestSetTenantsRemovesADeletedTenantsObjects(t *testing.T) {
	dir := t.TempDir()
	s, clk := newStore(t, Config{Dir: dir})
	created := clk.Now()
	s.SetTenants(map[string]time.Time{"gone": created, "again": created, "kept": created, "declared": {}, "dropped": {}, "shadowed": created})
	put := func(tenant string) string {
		t.Helper()
		info, err := s.Put(tenant, strings.NewReader("bytes of "+tenant), "text/plain", "")
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	ids := map[string]string{}
	for _, tenant := range []string{"gone", "again", "kept", "declared", "dropped", "shadowed"} {
		ids[tenant] = put(tenant)
	}
	writing, err := s.Begin("gone", "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writing.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	s.SetTenants(map[string]time.Time{"again": created.Add(time.Second), "kept": created, "declared": {}, "shadowed": {}})
	for tenant, id := range ids {
		obj, err := s.Open(tenant, id)
		if want := tenant != "gone" && tenant != "again"; want != (err == nil) {
			t.Errorf("%s's object after the apply: err = %v, want kept %v", tenant, err, want)
		}
		if err == nil {
			obj.Close()
		}
	}
	if _, err := writing.Commit(); err == nil {
		t.Error("the deleted tenant's upload in progress committed")
	}
	for _, tenant := range []string{"gone", "again"} {
		if _, ofTenant := s.usage(tenant); ofTenant != 0 {
			t.Errorf("%s still uses %d bytes", tenant, ofTenant)
		}
	}
	if files, err := os.ReadDir(dir); err != nil || len(files) != 4 {
		t.Fatalf("%d files remain (%v); want the 4 kept objects'", len(files), err)
	}
}

// TestSetTenantsRemovesAnUploadOfATenantGone: an object begun for a tenant
// the last SetTenants did not list (an upload its gateway's bearer let in
// just before the tenant's deletion was applied) is removed by the next
// call, so a tenant made again under the id does not inherit it.
func TestSetTenantsRemovesAnUploadOfATenantGone(t *testing.T) {
	s, clk := newStore(t, Config{})
	s.SetTenants(map[string]time.Time{"kept": clk.Now()})
	late, err := s.Put("gone", strings.NewReader("late"), "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.Put("kept", strings.NewReader("kept"), "text/plain", "")
	if err != nil {
		t.Fatal(err)
	}
	s.SetTenants(map[string]time.Time{"kept": clk.Now(), "gone": clk.Now().Add(time.Second)})
	if obj, err := s.Open("gone", late.ID); err == nil {
		obj.Close()
		t.Error("the object stored for a tenant gone is fetchable by the tenant made again under its id")
	}
	obj, err := s.Open("kept", kept.ID)
	if err != nil {
		t.Fatalf("the kept tenant's object: %v", err)
	}
	obj.Close()
}

// TestSetTenantsKeepsAnUploadOfATenantNotYetApplied: an object begun for a
// tenant the last SetTenants did not list because it was created since
// (the relay applied the change, and let its gateway's upload in, before
// the media store did) is kept by the next call, which lists the tenant
// as created before the upload began; so is one of a tenant the YAML now
// declares. Before, both were removed as a deleted tenant's, after their
// ids had been answered.
func TestSetTenantsKeepsAnUploadOfATenantNotYetApplied(t *testing.T) {
	s, clk := newStore(t, Config{})
	created := clk.Now()
	s.SetTenants(map[string]time.Time{"kept": created})
	clk.Advance(time.Second)
	var ids []string
	for _, tenant := range []string{"new", "declared"} {
		info, err := s.Put(tenant, strings.NewReader("early"), "text/plain", "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	s.SetTenants(map[string]time.Time{"kept": created, "new": created.Add(time.Millisecond), "declared": {}})
	s.SetTenants(map[string]time.Time{"kept": created, "new": created.Add(time.Millisecond), "declared": {}})
	for i, tenant := range []string{"new", "declared"} {
		obj, err := s.Open(tenant, ids[i])
		if err != nil {
			t.Fatalf("%s's upload made before its tenant was applied: %v", tenant, err)
		}
		obj.Close()
	}
}

// TestDownloadToAClientThatStopsReadingEnds: a gateway that asks for an
// object and then reads none of it (a zero receive window) held the
// request's connection, its slot among the public listener's
// unauthenticated connections and the object's file for as long as it
// liked; the answer now gives up after media.upload_timeout, as the
// upload's body does.
func TestDownloadToAClientThatStopsReadingEnds(t *testing.T) {
	s, _ := newStore(t, Config{MaxBytes: 32 << 20, UploadTimeout: 300 * time.Millisecond})
	info, err := s.Put("t1", bytes.NewReader(make([]byte, 32<<20)), "application/octet-stream", "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1"}})
	done := make(chan struct{})
	srv := httptest.NewServer(httpMux(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		h.ServeHTTP(w, r)
	})))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(conn, "GET /relay/media/%s HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer tok1\r\n\r\n", info.ID); err != nil {
		t.Fatal(err)
	}
	select { // never reading the answer
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the download's handler still writes to a client that stopped reading 10 s after the request (upload_timeout 300ms)")
	}
}

// TestDownloadToASlowClientThatKeepsReadingEnds: media.upload_timeout
// bounds each chunk's write of a download, not the whole answer: a gateway
// fetching an object slowly but steadily (a 25 MiB one at under 210 KB/s
// takes over 2 m) was cut off once the download took upload_timeout.
func TestDownloadToASlowClientThatKeepsReadingEnds(t *testing.T) {
	const size = 1 << 20
	s, _ := newStore(t, Config{MaxBytes: 32 << 20, UploadTimeout: 500 * time.Millisecond})
	info, err := s.Put("t1", bytes.NewReader(make([]byte, size)), "application/octet-stream", "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(httpMux(s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1"}})))
	srv.Listener = smallSendBuffers{srv.Listener} // so the kernel cannot take the object at once
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	if _, err := fmt.Fprintf(conn, "GET /relay/media/%s HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer tok1\r\nConnection: close\r\n\r\n", info.ID); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start, n, buf := time.Now(), 0, make([]byte, 32<<10)
	for pace := time.NewTicker(50 * time.Millisecond); ; <-pace.C { // about 640 KB/s: 1.6 s for the object
		m, err := io.ReadFull(resp.Body, buf)
		if n += m; err != nil {
			if n != size {
				t.Fatalf("got %d bytes of %d in %v (upload_timeout 500ms), then %v", n, size, time.Since(start), err)
			}
			return
		}
	}
}

// smallSendBuffers gives every accepted connection a small send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestDownloadToAClientBelowTheMinimumRateEnds: media.upload_timeout
// bounded only the time a download made no progress, so a client taking a
// chunk just inside it (about 270 B/s by default) held a 25 MiB download,
// and its connection slot, for a day. Past its first upload_timeout a
// download must now average the minimum rate (lowered here to 1 MiB/s; a
// client reads about 400 KiB/s, each chunk well inside the deadline).
func TestDownloadToAClientBelowTheMinimumRateEnds(t *testing.T) {
	const size = 8 << 20
	s, _ := newStore(t, Config{MaxBytes: 32 << 20, UploadTimeout: time.Second})
	info, err := s.Put("t1", bytes.NewReader(make([]byte, size)), "application/octet-stream", "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(httpMux(s.Handler(HandlerConfig{Auth: tokens{"tok1": "t1"}, minRate: 1 << 20})))
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	if _, err := fmt.Fprintf(conn, "GET /relay/media/%s HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer tok1\r\nConnection: close\r\n\r\n", info.ID); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, buf := 0, make([]byte, 32<<10)
	for pace := time.NewTicker(80 * time.Millisecond); ; <-pace.C { // about 400 KiB/s: 20 s for the object
		m, err := io.ReadFull(resp.Body, buf)
		if n += m; err != nil {
			if n == size || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a client reading 400 KiB/s, under the 1 MiB/s minimum, still got %d bytes of %d after 15 s: %v", n, size, err)
			}
			return
		}
	}
}

// usage reports the bytes stored in all and for tenant.
func (s *Store) usage(tenant string) (total, ofTenant int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.byTenant[tenant]
}
