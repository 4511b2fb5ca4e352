package relay_test

import (
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// TestMain fails the package when a goroutine started by the relay outlives
// the tests: every connection's reader, writer and pinger must end with it.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 5*time.Second, "connector/relay.", "connector/internal/wsconn.")
}
