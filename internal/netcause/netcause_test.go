package netcause

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connector/internal/refusedtest"
)

// wrap dresses a cause the way net/http returns it: a url.Error holding
// the URL around a net.OpError holding the peer address.
func wrap(cause error) error {
	return &url.Error{Op: "Post", URL: "http://10.9.8.7:8081/bot123:SECRET/sendMessage", Err: &net.OpError{
		Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 8081}, Err: cause,
	}}
}

func TestDescribeNamesTheClassOnly(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"refused", wrap(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), "connection refused"},
		{"reset", wrap(&os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}), "connection reset"},
		{"unreachable", wrap(&os.SyscallError{Syscall: "connect", Err: syscall.ENETUNREACH}), "network unreachable"},
		{"dns not found", wrap(&net.DNSError{Err: "no such host", Name: "api.telegram.org", Server: "10.0.0.53:53", IsNotFound: true}), "DNS lookup failed: no such host"},
		{"dns timeout", wrap(&net.DNSError{Err: "i/o timeout", Name: "discord.com", Server: "10.0.0.53:53", IsTimeout: true}), "DNS lookup timed out"},
		{"dns server failure", wrap(&net.DNSError{Err: "server misbehaving", Name: "discord.com", Server: "10.0.0.53:53"}), "DNS lookup failed"},
		{"deadline", wrap(os.ErrDeadlineExceeded), "timed out"},
		{"client timeout", fmt.Errorf("call: %w", &url.Error{Op: "Get", URL: "http://10.9.8.7/", Err: context.DeadlineExceeded}), "timed out"},
		{"tls", wrap(x509.UnknownAuthorityError{}), "TLS handshake failed"},
		{"eof", &url.Error{Op: "Get", URL: "http://10.9.8.7/x", Err: io.EOF}, "connection closed"},
		{"unknown", errors.New("dial tcp 10.9.8.7:8081: something new"), "network error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name != "unknown" && !IsNetwork(c.err) {
				t.Fatalf("IsNetwork(%v) = false", c.err)
			}
			got := Describe(c.err)
			if got != c.want {
				t.Fatalf("Describe(%v) = %q, want %q", c.err, got, c.want)
			}
			for _, leak := range []string{"10.", "8081", "53", "SECRET", "telegram.org", "discord.com", "http"} {
				if strings.Contains(got, leak) {
					t.Fatalf("%q leaks %q", got, leak)
				}
			}
		})
	}
}

// TestDescribeRealFailures runs real requests: to a closed loopback port
// and past a deadline against a server that never answers.
func TestDescribeRealFailures(t *testing.T) {
	_, err := http.Get(refusedtest.URL(t) + "/")
	if got := Describe(err); got != "connection refused" {
		t.Fatalf("closed port: %q (from %v)", got, err)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	client := &http.Client{Timeout: 50 * time.Millisecond}
	_, err = client.Get("http://" + silent.Addr().String() + "/")
	if got := Describe(err); got != "timed out" {
		t.Fatalf("silent server: %q (from %v)", got, err)
	}
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the silent server's accept")
	}
}

func TestIsNetworkRejectsAnswers(t *testing.T) {
	for _, err := range []error{errors.New("bad request, chat not found"), context.Canceled, nil} {
		if IsNetwork(err) {
			t.Errorf("IsNetwork(%v) = true", err)
		}
	}
}
