package telegram

import (
	"sync"

	"connector/platform"
)

// health is the platform's readiness, as Status reports it. Every change
// closes changed, so a waiter can watch it without polling.
type health struct {
	mu      sync.Mutex
	st      platform.Status
	changed chan struct{}
}

func (h *health) set(st platform.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st == st || h.st.Terminal {
		return
	}
	h.st = st
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *health) watch() (platform.Status, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st, h.changed
}
