package store

import (
	"context"
	"sync"
)

// subscription is one Subscribe's delivery channel. Sends never block: a
// full buffer drops the message (PubSub is at most once).
type subscription struct {
	ch chan []byte
}

func newSubscription() *subscription {
	return &subscription{ch: make(chan []byte, SubscriptionBuffer)}
}

// offer delivers msg unless the buffer is full.
func (s *subscription) offer(msg []byte) {
	select {
	case s.ch <- msg:
	default:
	}
}

// broker is the in-process PubSub of the memory and embedded backends.
type broker struct {
	mu     sync.Mutex
	closed bool
	subs   map[string]map[*subscription]struct{} // channel -> subscribers
}

var _ PubSub = (*broker)(nil)

func newBroker() *broker {
	return &broker{subs: make(map[string]map[*subscription]struct{})}
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
		s.offer(msg)
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
	s := newSubscription()
	if b.subs[channel] == nil {
		b.subs[channel] = make(map[*subscription]struct{})
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
				close(s.ch)
			}
		})
	}
	stop := context.AfterFunc(ctx, cancel)
	return s.ch, func() { stop(); cancel() }, nil
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
			close(s.ch)
		}
	}
	b.subs = nil
}
