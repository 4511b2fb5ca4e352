package store

import (
	"cmp"
	"context"
	"fmt"
	"sync"

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
// SUBSCRIBE and kept until the store is closed. One goroutine (write)
// writes every SUBSCRIBE and UNSUBSCRIBE, in the order the channels map
// changed, so no caller waits for a go-redis call (which may dial a
// connection that is down, and holds the PubSub meanwhile). One goroutine
// (dispatch) reads the connection: it hands each message to every
// subscriber of its channel, and each server confirmation of a SUBSCRIBE
// to the Subscribe calls waiting for it. go-redis reconnects after a
// connection error and subscribes every channel again; what was published
// meanwhile is lost.
type redisSubs struct {
	c redis.UniversalClient
	// ctx ends when the store closes; the writes use it.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards what follows.
	mu     sync.Mutex
	closed bool
	ps     *redis.PubSub         // nil until the first Subscribe
	chans  map[string]*redisChan // Redis channel -> its subscribers
	ops    []subOp               // the writes write has not taken yet
	wake   chan struct{}         // a write queued
	// writing and dispatching say write and dispatch started.
	writing, dispatching bool
	// leaving counts each channel's UNSUBSCRIBEs queued whose reply
	// dispatch has not read: a confirmation read before them answers a
	// SUBSCRIBE sent earlier (a reconnection's), not the channel's last.
	leaving map[string]int
}

// subOp is a SUBSCRIBE (sub) or UNSUBSCRIBE of key to write; ch, for a
// channel's first SUBSCRIBE, is the channel whose Subscribe calls fail
// with it.
type subOp struct {
	key string
	sub bool
	ch  *redisChan
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
	// failed is closed, with err set, when its SUBSCRIBE could not be
	// written (the connection down): the channel is dropped.
	failed chan struct{}
	err    error
}

func newRedisSubs(c redis.UniversalClient) *redisSubs {
	ctx, cancel := context.WithCancel(context.Background())
	return &redisSubs{c: c, ctx: ctx, cancel: cancel, chans: make(map[string]*redisChan), leaving: make(map[string]int), wake: make(chan struct{}, 1)}
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
		rs.ps = rs.c.Subscribe(rs.ctx) // no channel: connects with the first
	}
	if !rs.writing {
		rs.writing = true
		go rs.write()
	}
	ch := rs.chans[key]
	if ch == nil {
		ch = &redisChan{subs: make(map[subscription]struct{}), ready: make(chan struct{}), failed: make(chan struct{})}
		rs.chans[key] = ch
		rs.queue(subOp{key: key, sub: true, ch: ch})
	}
	sub := make(subscription, SubscriptionBuffer)
	ch.subs[sub] = struct{}{}
	rs.mu.Unlock()

	var once sync.Once
	cancel := func() { once.Do(func() { rs.leave(key, ch, sub) }) }
	select {
	case <-ch.ready:
	case <-ch.failed:
		return nil, nil, fmt.Errorf("store: subscribe: %w", rerr(ch.err))
	case <-ctx.Done():
		cancel()
		return nil, nil, fmt.Errorf("store: subscribe: %w", ctx.Err())
	case <-rs.ctx.Done():
		return nil, nil, ErrClosed
	}
	stopAfter := context.AfterFunc(ctx, cancel)
	return sub, func() { stopAfter(); cancel() }, nil
}

// queue hands op to write; rs.mu is held.
func (rs *redisSubs) queue(op subOp) {
	rs.ops = append(rs.ops, op)
	select {
	case rs.wake <- struct{}{}:
	default:
	}
}

// write writes the queued SUBSCRIBEs and UNSUBSCRIBEs in order until the
// store closes, and starts dispatch after the first SUBSCRIBE written,
// whose channel then picks the node of a Redis Cluster.
func (rs *redisSubs) write() {
	for {
		select {
		case <-rs.ctx.Done():
			return
		case <-rs.wake:
		}
		rs.mu.Lock()
		ops := rs.ops
		rs.ops = nil
		rs.mu.Unlock()
		for _, op := range ops {
			if !op.sub {
				if rs.ps.Unsubscribe(noDial, op.key) != nil {
					rs.mu.Lock()
					rs.unsubscribed(op.key) // not written: no reply comes
					rs.mu.Unlock()
				}
				continue
			}
			err := rs.ps.Subscribe(rs.ctx, op.key)
			rs.mu.Lock()
			if err == nil && !rs.dispatching && !rs.closed {
				rs.dispatching = true
				go rs.dispatch(rs.ps.ChannelWithSubscriptions(redis.WithChannelSize(SubscriptionBuffer)))
			}
			if err != nil && op.ch != nil && !op.ch.confirmed && rs.chans[op.key] == op.ch {
				// The connection was replaced without key, or is down:
				// take key out of the PubSub's channels again, so no
				// reconnection subscribes it.
				rs.unsubscribe(op.key)
				op.ch.err = err
				close(op.ch.failed)
			}
			rs.mu.Unlock()
		}
	}
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

// unsubscribe forgets key and queues its UNSUBSCRIBE; rs.mu is held. write
// sends it on the connection if it is up (noDial): a connection that is
// down is reconnected by dispatch's reading, without key.
func (rs *redisSubs) unsubscribe(key string) {
	delete(rs.chans, key)
	rs.leaving[key]++
	rs.queue(subOp{key: key})
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
	for m := range in {
		switch m := m.(type) {
		case *redis.Message:
			rs.deliver(m.Channel, []byte(m.Payload))
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				rs.confirm(m.Channel)
			case "unsubscribe":
				rs.mu.Lock()
				rs.unsubscribed(m.Channel)
				rs.mu.Unlock()
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
		rs.queue(subOp{key: key, sub: true})
		return
	}
	ch.confirmed = true
	close(ch.ready)
	if len(ch.subs) == 0 {
		rs.unsubscribe(key)
	}
}

// unsubscribed counts the reply to an UNSUBSCRIBE of key, or one not
// written; rs.mu is held.
func (rs *redisSubs) unsubscribed(key string) {
	if rs.leaving[key] > 1 {
		rs.leaving[key]--
	} else {
		delete(rs.leaving, key)
	}
}

// close closes every subscription and the connection; later subscribe
// calls fail with ErrClosed. It does not wait for the connection's close:
// go-redis holds the PubSub while it connects, up to a read timeout for a
// handshake a server does not answer (that connection is not the client's
// yet, so closing the client does not cut it), and write and dispatch end
// once it is closed.
func (rs *redisSubs) close() {
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return
	}
	rs.closed = true
	rs.cancel()
	for _, ch := range rs.chans {
		for sub := range ch.subs {
			delete(ch.subs, sub)
			close(sub)
		}
	}
	rs.chans = nil
	ps := rs.ps
	rs.mu.Unlock()
	if ps != nil {
		go ps.Close()
	}
}
