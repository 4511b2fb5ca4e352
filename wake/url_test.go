package wake_test

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"connector/wake"
)

// lockedWriter serializes a logger's writes to a builder.
type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Writer(lockedWriter{b, mu}), nil))
}

func TestValidateURL(t *testing.T) {
	good := []string{
		"https://gw.example.com/wake",
		"http://127.0.0.1:8642/",
		"https://my-app.fly.dev",
		"https://[::1]:443/wake?x=1",
	}
	for _, u := range good {
		if got, err := wake.ValidateURL(u); err != nil || got != u {
			t.Errorf("ValidateURL(%q) = %q, %v; want it accepted as is", u, got, err)
		}
	}
	bad := []string{
		"",
		"ftp://example.com/",
		"file:///etc/passwd",
		"javascript:alert(1)",
		"https://user:pass@example.com/",
		"https://user@example.com/",
		"https:///nohost",
		"https://example.com/#frag",
		"https://example.com:0/",
		"https://example.com:99999/",
		"https://exa mple.com/",
		"https://example.com/\n",
		"mailto:a@example.com",
		"//example.com/",
		"https://" + strings.Repeat("a", wake.MaxURLBytes) + ".com/",
	}
	for _, u := range bad {
		_, err := wake.ValidateURL(u)
		if !errors.Is(err, wake.ErrInvalidURL) {
			t.Errorf("ValidateURL(%q): err %v, want ErrInvalidURL", u, err)
			continue
		}
		if u != "" && strings.Contains(err.Error(), u) {
			t.Errorf("ValidateURL(%q): the error echoes the URL: %v", u, err)
		}
	}
	if got := wake.Host("https://gw.example.com:8443/wake?token=x"); got != "gw.example.com:8443" {
		t.Errorf("Host = %q", got)
	}
}

// FuzzValidateURL: any input is accepted or refused without panicking; an
// accepted URL is an http(s) URL with a host and no userinfo, within the
// length bound, and is accepted again as is.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{"https://gw.example.com/wake", "http://u:p@h/", "https://[::1]:80/", "http://h:0", "https://h/#x", "HTTPS://H/", "http://%zz/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := wake.ValidateURL(s)
		if err != nil {
			if !errors.Is(err, wake.ErrInvalidURL) {
				t.Fatalf("error %v is not ErrInvalidURL", err)
			}
			return
		}
		if got != s || len(s) > wake.MaxURLBytes {
			t.Fatalf("accepted %q as %q", s, got)
		}
		lower := strings.ToLower(s)
		if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
			t.Fatalf("accepted a non-http URL %q", s)
		}
		if wake.Host(s) == "" || strings.Contains(wake.Host(s), "@") {
			t.Fatalf("accepted %q with host %q", s, wake.Host(s))
		}
		if again, err := wake.ValidateURL(got); err != nil || again != got {
			t.Fatalf("not stable: %q -> %q, %v", got, again, err)
		}
	})
}

// TestValidateURLWantsAnASCIIHost: a host name outside ASCII is refused
// (its punycode xn-- form is taken). HTTP clients map it (IDNA) to an
// ASCII name, so ｖictim.example, vｉctim.example, ... all reach
// victim.example, and each such spelling would get its own per-host poke
// budget (relay.wake_per_host).
func TestValidateURLWantsAnASCIIHost(t *testing.T) {
	for _, u := range []string{"https://ｖictim.example/wake", "https://victim。example/", "https://exämple.com/"} {
		if _, err := wake.ValidateURL(u); !errors.Is(err, wake.ErrInvalidURL) {
			t.Errorf("ValidateURL(%q): err = %v, want ErrInvalidURL", u, err)
		}
	}
	if _, err := wake.ValidateURL("https://xn--exmple-cua.com/wake?t=é"); err != nil {
		t.Errorf("a punycode host (non-ASCII query): %v", err)
	}
}
