package platformtest

import (
	"sync"

	"connector/platform"
)

// LastDrop is the platform.Metrics double of the settings-parity tests:
// it keeps the reason of the latest dropped event, which Take returns
// once. The zero value is ready.
type LastDrop struct {
	platform.NopMetrics
	mu     sync.Mutex
	reason string
}

// Dropped implements platform.Metrics.
func (l *LastDrop) Dropped(_, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reason = reason
}

// Take returns the latest drop's reason ("" for none since the last
// Take) and forgets it.
func (l *LastDrop) Take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reason
	l.reason = ""
	return r
}
