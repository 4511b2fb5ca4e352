package refusedtest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestAddrRefusesAndKeepsItsPort: a dial to Addr is refused, and no
// listener can take its port while the test runs.
func TestAddrRefusesAndKeepsItsPort(t *testing.T) {
	addr := Addr(t)
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s, which Addr holds", addr)
	}
}
