package vault_test

import (
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// TestMain fails the binary when a goroutine of the vault, or of an LRU it
// built, outlives the tests: a Memory (and the Durable vault in front of
// every store) must run none, so tests and instances may create any number.
func TestMain(m *testing.M) { leakcheck.Main(m, 5*time.Second, "connector/vault.", "golang-lru/") }
