package relay

import (
	"context"
	"errors"
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
	// Deliver publishes d and returns once every subscriber took it (for
	// the relay: stored it durably). It must not block on gateway sockets.
	// It fails when a subscriber fails or nobody subscribes.
	platform.Sink
	// Subscribe registers fn for every delivery published after it returns.
	// fn returns once it took the delivery, without blocking on gateway
	// sockets. The returned func unsubscribes.
	Subscribe(fn func(context.Context, platform.Delivery) error) (cancel func())
}

// ErrNoSubscriber is returned by MemoryBus.Deliver when nobody subscribes
// (the relay has shut down): the delivery was not taken.
var ErrNoSubscriber = errors.New("relay: no subscriber takes deliveries")

// MemoryBus is the in-process Bus: Deliver calls every subscriber
// synchronously on the caller's goroutine.
type MemoryBus struct {
	mu   sync.RWMutex
	next int
	subs map[int]func(context.Context, platform.Delivery) error
}

var _ Bus = (*MemoryBus)(nil)

// NewMemoryBus returns an empty in-process bus.
func NewMemoryBus() *MemoryBus {
	return &MemoryBus{subs: make(map[int]func(context.Context, platform.Delivery) error)}
}

// Deliver implements platform.Sink.
func (b *MemoryBus) Deliver(ctx context.Context, d platform.Delivery) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if len(b.subs) == 0 {
		return ErrNoSubscriber
	}
	var errs []error
	for _, fn := range b.subs {
		if err := fn(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Subscribe implements Bus.
func (b *MemoryBus) Subscribe(fn func(context.Context, platform.Delivery) error) func() {
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
