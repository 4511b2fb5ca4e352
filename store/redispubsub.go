package store

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type redisPubSub struct{ s *redisStore }

func (p redisPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	_, err := p.PublishAll(ctx, []Message{{Channel: channel, Msg: msg}})
	return err
}

var _ BatchPublisher = redisPubSub{}

// PublishAll implements BatchPublisher: the messages go in one pipeline
// (several when they fill one; on a Redis Cluster one per primary, a
// channel always on the same one), in order.
func (p redisPubSub) PublishAll(ctx context.Context, msgs []Message) (failed int, err error) {
	calls := make([]pipeCall, 0, len(msgs))
	for _, m := range msgs {
		if e := checkName("channel", m.Channel); e != nil {
			failed++
			err = cmp.Or(err, e)
			continue
		}
		key, msg := p.s.p+"channel:"+m.Channel, m.Msg
		calls = append(calls, pipeCall{key: key, queue: func(ctx context.Context, pipe redis.Pipeliner) redis.Cmder { return pipe.Publish(ctx, key, msg) }})
	}
	for _, c := range p.s.pipelinedAll(ctx, calls) {
		if e := c.err(); e != nil {
			failed++
			err = cmp.Or(err, fmt.Errorf("store: publish: %w", rerr(e)))
		}
	}
	return failed, err
}

func (p redisPubSub) Subscribe(ctx context.Context, channel string) (<-chan []byte, func(), error) {
	if err := checkName("channel", channel); err != nil {
		return nil, nil, err
	}
	return p.s.subs.subscribe(ctx, p.s.p+"channel:"+channel)
}

// redisSubs holds every subscription of one store on one go-redis PubSub,
// so on one Redis connection however many channels are subscribed (on a
// Redis Cluster too: go-redis's cluster PubSub connects to one node, the
// primary of the slot of one of its channels, and the cluster bus brings
// every node each PUBLISH). The connection is opened by the first
// Subscribe and kept until the store is closed. One goroutine (dispatch)
// reads it: it hands each message to every subscriber of its channel, and
// each server confirmation of a SUBSCRIBE to the Subscribe calls waiting
// for it. go-redis reconnects after a connection error and subscribes every
// channel again; what was published meanwhile is lost.
type redisSubs struct {
	c redis.UniversalClient

	// mu guards what follows. It is held while SUBSCRIBE and UNSUBSCRIBE
	// are written, so the server sees them in the order the map changed.
	mu     sync.Mutex
	closed bool
	ps     *redis.PubSub         // nil until the first Subscribe
	chans  map[string]*redisChan // Redis channel -> its subscribers
	done   chan struct{}         // closed when dispatch returns
	stop   chan struct{}         // closed by close
	// leaving counts each channel's UNSUBSCRIBEs written whose reply
	// dispatch has not read: a confirmation read before them answers a
	// SUBSCRIBE sent earlier (a reconnection's), not the channel's last.
	leaving map[string]int
}

// redisChan is one subscribed Redis channel.
type redisChan struct {
	subs map[subscription]struct{}
	// ready is closed when the server confirmed the SUBSCRIBE; confirmed
	// says so under redisSubs.mu. A channel whose subscribers all left
	// before is unsubscribed by that confirmation, so a later SUBSCRIBE of
	// the channel never takes an earlier one's confirmation for its own.
	ready     chan struct{}
	confirmed bool
}

func newRedisSubs(c redis.UniversalClient) *redisSubs {
	return &redisSubs{c: c, chans: make(map[string]*redisChan), leaving: make(map[string]int), stop: make(chan struct{})}
}

// subscribe adds a subscriber of the Redis channel key and returns once the
// server confirmed key's subscription, or ctx is done.
func (rs *redisSubs) subscribe(ctx context.Context, key string) (<-chan []byte, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: subscribe: %w", err)
	}
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if rs.ps == nil {
		rs.ps = rs.c.Subscribe(ctx) // no channel: connects with the first
	}
	ch := rs.chans[key]
	if ch == nil {
		ch = &redisChan{subs: make(map[subscription]struct{}), ready: make(chan struct{})}
		// Without ctx's deadline: go-redis writes on the shared connection
		// with it, and a write failed by a deadline that passed while this
		// call waited for its turn would drop every subscription's
		// connection. ctx's cancellation still ends a dial.
		err := rs.ps.Subscribe(noDeadline{ctx}, key)
		if err == nil && rs.done == nil {
			// Started after the first SUBSCRIBE written, whose channel
			// then picks the node of a Redis Cluster.
			rs.done = make(chan struct{})
			go rs.dispatch(rs.ps.ChannelWithSubscriptions(redis.WithChannelSize(SubscriptionBuffer)))
		}
		if err != nil {
			// The connection was replaced without key, or is down: take
			// key out of the PubSub's channels again, so no reconnection
			// subscribes it.
			rs.unsubscribe(key)
			rs.mu.Unlock()
			return nil, nil, fmt.Errorf("store: subscribe: %w", rerr(err))
		}
		rs.chans[key] = ch
	}
	sub := make(subscription, SubscriptionBuffer)
	ch.subs[sub] = struct{}{}
	rs.mu.Unlock()

	var once sync.Once
	cancel := func() { once.Do(func() { rs.leave(key, ch, sub) }) }
	select {
	case <-ch.ready:
	case <-ctx.Done():
		cancel()
		return nil, nil, fmt.Errorf("store: subscribe: %w", ctx.Err())
	case <-rs.stop:
		return nil, nil, ErrClosed
	}
	stopAfter := context.AfterFunc(ctx, cancel)
	return sub, func() { stopAfter(); cancel() }, nil
}

// leave removes sub from ch and closes it; the last subscriber of a
// confirmed channel unsubscribes it.
func (rs *redisSubs) leave(key string, ch *redisChan, sub subscription) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := ch.subs[sub]; !ok {
		return // closed with the store
	}
	delete(ch.subs, sub)
	close(sub)
	if len(ch.subs) == 0 && ch.confirmed {
		rs.unsubscribe(key)
	}
}

// unsubscribe forgets key and sends its UNSUBSCRIBE on the connection if
// it is up. A failed write makes go-redis reconnect without key, which
// ends its subscription too. rs.mu is held: a connection that is down is
// not dialled (noDial); dispatch's reading reconnects it, without key.
func (rs *redisSubs) unsubscribe(key string) {
	delete(rs.chans, key)
	if rs.ps.Unsubscribe(noDial, key) == nil {
		rs.leaving[key]++
	}
}

// noDial is done from the start: go-redis writes with it on a connection
// that is up, and fails at once the dial of one that is down.
var noDial = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// dispatch reads the PubSub until it is closed.
func (rs *redisSubs) dispatch(in <-chan any) {
	defer close(rs.done)
	for m := range in {
		switch m := m.(type) {
		case *redis.Message:
			rs.deliver(m.Channel, []byte(m.Payload))
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				rs.confirm(m.Channel)
			case "unsubscribe":
				rs.unsubscribed(m.Channel)
			}
		}
	}
}

// deliver offers msg to every subscriber of key; they share it read-only.
func (rs *redisSubs) deliver(key string, msg []byte) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if ch := rs.chans[key]; ch != nil {
		for sub := range ch.subs {
			offer(sub, msg)
		}
	}
}

// confirm marks key's subscription confirmed by the server and releases
// its waiting Subscribe calls; a channel left meanwhile is unsubscribed.
// A confirmation after a reconnection finds the channel confirmed. One read
// while an UNSUBSCRIBE of key is unanswered may be a reconnection's, sent
// before it: key is subscribed again, and the next confirmation answers a
// SUBSCRIBE sent after that UNSUBSCRIBE (the channel's own, or this one,
// whose UNSUBSCRIBE's reply a reconnection lost).
func (rs *redisSubs) confirm(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	ch := rs.chans[key]
	if ch == nil || ch.confirmed {
		return
	}
	if rs.leaving[key] > 0 {
		delete(rs.leaving, key)
		_ = rs.ps.Subscribe(noDial, key)
		return
	}
	ch.confirmed = true
	close(ch.ready)
	if len(ch.subs) == 0 {
		rs.unsubscribe(key)
	}
}

// unsubscribed counts the reply to an UNSUBSCRIBE of key.
func (rs *redisSubs) unsubscribed(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.leaving[key] > 1 {
		rs.leaving[key]--
	} else {
		delete(rs.leaving, key)
	}
}

// close closes every subscription and the connection; later subscribe
// calls fail with ErrClosed.
func (rs *redisSubs) close() {
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return
	}
	rs.closed = true
	close(rs.stop)
	for _, ch := range rs.chans {
		for sub := range ch.subs {
			delete(ch.subs, sub)
			close(sub)
		}
	}
	rs.chans = nil
	ps, done := rs.ps, rs.done
	rs.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	if done != nil {
		<-done
	}
}

// noDeadline is a context without its parent's deadline, still done when
// the parent is.
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }
