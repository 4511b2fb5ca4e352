package wsconn

import (
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// TestMain fails the run when a writer, ping or test goroutine outlives the
// tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 5*time.Second, "connector/internal/wsconn.")
}
