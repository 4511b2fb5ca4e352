package store

import (
	"context"
	"sync"
)

// subscription is one Subscribe's delivery channel, of SubscriptionBuffer
// messages.
type subscription = chan []byte

// offer delivers msg to s unless its buffer is full: sends never block, a
// full buffer drops the message (PubSub is at most once).
func offer(s subscription, msg []byte) {
	select {
	case s <- msg:
	default:
	}
}

// broker is the in-process PubSub of the memory and embedded backends.
type broker struct {
	mu     sync.Mutex
	closed bool
	subs   map[string]map[subscription]struct{} // channel -> subscribers
}

var _ PubSub = (*broker)(nil)

func newBroker() *broker {
	return &broker{subs: make(map[string]map[subscription]struct{})}
}

// Publish implements PubSub.
func (b *broker) Publish(ctx context.Context, channel string, msg []byte) error {
	if err := checkName("channel", channel); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	subs := b.subs[channel]
	if len(subs) == 0 {
		return nil
	}
	msg = append([]byte(nil), msg...) // one copy, shared read-only by the receivers
	for s := range subs {
		offer(s, msg)
	}
	return nil
}

// Subscribe implements PubSub.
func (b *broker) Subscribe(ctx context.Context, channel string) (<-chan []byte, func(), error) {
	if err := checkName("channel", channel); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, ErrClosed
	}
	s := make(subscription, SubscriptionBuffer)
	if b.subs[channel] == nil {
		b.subs[channel] = make(map[subscription]struct{})
	}
	b.subs[channel][s] = struct{}{}
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if _, ok := b.subs[channel][s]; ok {
				delete(b.subs[channel], s)
				if len(b.subs[channel]) == 0 {
					delete(b.subs, channel)
				}
				close(s)
			}
		})
	}
	stop := context.AfterFunc(ctx, cancel)
	return s, func() { stop(); cancel() }, nil
}

// close ends every subscription; later calls fail with ErrClosed.
func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, subs := range b.subs {
		for s := range subs {
			close(s)
		}
	}
	b.subs = nil
}
