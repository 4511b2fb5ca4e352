package relay

import (
	"context"
	"sync"

	"connector/platform"
)

// Bus carries deliveries from producers (platform ingest, gateway
// interrupts) to the relay that holds the tenants' gateway sockets. The
// in-process MemoryBus hands each delivery straight to the subscribers; a
// shared bus (Redis streams, say) can implement the same interface so several
// connector instances serve one fleet of gateways without the platforms
// noticing.
type Bus interface {
	// Deliver publishes d. It must not block on gateway sockets.
	platform.Sink
	// Subscribe registers fn for every delivery published after it returns.
	// fn must not block. The returned func unsubscribes.
	Subscribe(fn func(platform.Delivery)) (cancel func())
}

// MemoryBus is the in-process Bus: Deliver calls every subscriber
// synchronously on the caller's goroutine.
type MemoryBus struct {
	mu   sync.RWMutex
	next int
	subs map[int]func(platform.Delivery)
}

var _ Bus = (*MemoryBus)(nil)

// NewMemoryBus returns an empty in-process bus.
func NewMemoryBus() *MemoryBus { return &MemoryBus{subs: make(map[int]func(platform.Delivery))} }

// Deliver implements platform.Sink.
func (b *MemoryBus) Deliver(ctx context.Context, d platform.Delivery) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, fn := range b.subs {
		fn(d)
	}
	return nil
}

// Subscribe implements Bus.
func (b *MemoryBus) Subscribe(fn func(platform.Delivery)) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.subs[id] = fn
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
	}
}
