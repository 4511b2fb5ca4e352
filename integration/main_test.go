package integration

import (
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// TestMain fails the run when a goroutine of the relay, a platform or the
// Bot API library outlives the tests, as the platforms' own test binaries
// check for theirs.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 10*time.Second, "connector/relay.", "connector/platform/", "connector/internal/wsconn.", "go-telegram/bot.")
}
