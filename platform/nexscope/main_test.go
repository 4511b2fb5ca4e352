package nexscope

import (
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// TestMain fails the run when a goroutine of this package (a member's
// writer, a ping, a handler, a test client) outlives the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 10*time.Second, "connector/platform/nexscope.", "connector/internal/wsconn.")
}
