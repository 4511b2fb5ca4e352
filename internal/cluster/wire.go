package cluster

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// A message is one type byte, then fields, each a uvarint length and its
// bytes: first the sending instance, then (for a Call's request) the
// request's name, then the user's fields.

// typeResult is the type of a Call's result, and typeBundle that of a
// bundle: several messages for one channel published as one (publishLoop),
// each a field. Users' types are any other.
const (
	typeResult = 0
	typeBundle = 1
)

// maxBundle bounds a bundle's size in bytes; a message at least this large
// is published alone.
const maxBundle = 64 << 10

// bundle returns batch with the messages for one channel joined into
// bundles of at most maxBundle bytes, each channel's in order: an idle
// fleet's announcements to one instance cost one PUBLISH a batch, not one
// a socket.
func bundle(from string, batch []store.Message) []store.Message {
	byChannel := make(map[string][][]byte)
	var order []string
	for _, m := range batch {
		if _, ok := byChannel[m.Channel]; !ok {
			order = append(order, m.Channel)
		}
		byChannel[m.Channel] = append(byChannel[m.Channel], m.Msg)
	}
	if len(order) == len(batch) {
		return batch
	}
	out := batch[:0:0]
	for _, ch := range order {
		msgs := byChannel[ch]
		for len(msgs) > 0 {
			n, size := 0, 0
			for n < len(msgs) && (n == 0 || size+len(msgs[n]) <= maxBundle) {
				size += len(msgs[n])
				n++
			}
			m := msgs[0]
			if n > 1 {
				m = encode(typeBundle, from, nil, msgs[:n])
			}
			out = append(out, store.Message{Channel: ch, Msg: m})
			msgs = msgs[n:]
		}
	}
	return out
}

// encode returns a message of type typ from instance from: the request
// name req unless nil, then fields.
func encode(typ byte, from string, req []byte, fields [][]byte) []byte {
	n := 1 + binary.MaxVarintLen32 + len(from)
	if req != nil {
		n += binary.MaxVarintLen32 + len(req)
	}
	for _, f := range fields {
		n += binary.MaxVarintLen32 + len(f)
	}
	var last []byte // a large last field (a file chunk)
	if k := len(fields) - 1; k >= 0 && len(fields[k]) >= RefBytes {
		fields, last = fields[:k], fields[k]
		n -= len(last)
	}
	b := make([]byte, 1, n)
	b[0] = typ
	b = appendField(b, []byte(from))
	if req != nil {
		b = appendField(b, req)
	}
	for _, f := range fields {
		b = appendField(b, f)
	}
	if last != nil {
		// Appended past b's capacity: the message's memory is allocated
		// and filled, not zeroed first.
		b = appendField(b, last)
	}
	return b
}

func appendField(b, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

// decode splits msg into its type, its sender and its fields, which alias
// msg; ok is false for a malformed message (a field longer than what is
// left, no sender).
func decode(msg []byte) (typ byte, from string, fields [][]byte, ok bool) {
	if len(msg) == 0 {
		return 0, "", nil, false
	}
	typ, rest := msg[0], msg[1:]
	for len(rest) > 0 {
		l, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < l {
			return 0, "", nil, false
		}
		fields = append(fields, rest[k:k+int(l)])
		rest = rest[k+int(l):]
	}
	if len(fields) == 0 || len(fields[0]) == 0 {
		return 0, "", nil, false
	}
	return typ, string(fields[0]), fields[1:], true
}

// Sender is the instance an encoded message names as its sender; "" for
// a malformed message or a bundle, whose messages name their own.
func Sender(msg []byte) string {
	typ, from, _, ok := decode(msg)
	if !ok || typ == typeBundle {
		return ""
	}
	return from
}

// Call sends a request of type typ with fields on channel and waits for its
// result until ctx ends (false). The handler registered with HandleCall
// answers it with Reply.
func (n *Node) Call(ctx context.Context, channel string, typ byte, fields ...[]byte) (result []byte, ok bool) {
	if fields == nil {
		fields = [][]byte{} // not CallAgain's "no copy"
	}
	return n.CallAgain(ctx, "", 0, typ, func() (string, [][]byte) { return channel, fields })
}

// CallAgain is Call that sends the request again every interval (0:
// never) until it is answered, on the channel and with the fields build
// gives each time (nil fields: no copy this time; the first time it must
// give some): a request published while nobody subscribed to channel (a
// lease between holders) is lost, and a copy reaches whoever subscribed
// since, or the one instance (its Inbox) known to hold the request. Every
// copy is the one request, whose first result counts, so the handler must
// act on it once however often it arrives. A request for tenant ("":
// none) counts in its share as SendWait's do (a quarter of it, and
// BulkShare for all tenants): a tenant's flood of requests holds back its
// own, not the messages of no tenant (the beats).
func (n *Node) CallAgain(ctx context.Context, tenant string, every time.Duration, typ byte, build func() (channel string, fields [][]byte)) (result []byte, ok bool) {
	ch := make(chan []byte, 1)
	n.mu.Lock()
	n.nextReq++
	req := strconv.FormatUint(n.nextReq, 10)
	n.calls[req] = ch
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.calls, req)
		n.mu.Unlock()
	}()
	again := make(chan struct{}, 1)
	var t clock.Timer
	for {
		if channel, fields := build(); fields != nil {
			if !n.queueWait(ctx, queued{Message: store.Message{Channel: channel, Msg: encode(typ, n.cfg.Instance, []byte(req), fields)}, tenant: tenant, bulk: tenant != ""}) {
				return nil, false
			}
		}
		switch {
		case every <= 0:
		case t == nil:
			t = n.cfg.Clock.AfterFunc(every, func() { again <- struct{}{} }) // once per send: again is drained before the next
			defer t.Stop()
		default:
			t.Reset(every)
		}
		select {
		case res := <-ch:
			return res, true
		case <-ctx.Done():
			return nil, false
		case <-again:
		}
	}
}

// Reply answers m, a request a HandleCall handler got, with result; a
// full outbox loses it (Send: false).
func (n *Node) Reply(m Msg, result []byte) bool {
	return n.Send(Inbox(m.From), typeResult, m.req, result)
}

// ReplyWait is Reply waiting for room in the outbox (SendWait), for a
// result its caller would otherwise wait for until its deadline.
func (n *Node) ReplyWait(ctx context.Context, m Msg, result []byte) bool {
	return n.SendWait(ctx, "", Inbox(m.From), typeResult, m.req, result)
}

// answered hands a result (fields: the request's name, the result) to the
// Call waiting for it.
func (n *Node) answered(m Msg) {
	n.mu.Lock()
	ch := n.calls[string(m.Fields[0])]
	delete(n.calls, string(m.Fields[0]))
	n.mu.Unlock()
	if ch != nil {
		ch <- m.Fields[1]
	}
}

// Link counts the messages of one ordered stream from one instance to
// another (the frames of one socket, say), at both ends: the sender sends
// each with Send and tells the receiver Sent every beat (itself, or summed
// over many links in a digest, as the relay does); the receiver takes
// each with Take (or TakeOnce), and a false Take or a true Missing is a
// lost message. Send and Sent are the sender's, Take, TakeOnce, Received
// and Missing the receiver's; each side's own calls (Sent aside) come from one goroutine
// at a time.
type Link struct {
	next, sent, received atomic.Uint64
	taken                []uint64 // TakeOnce's sums of the last messages taken, by number; nil before
}

// Send numbers the next message and calls send with its number, which must
// queue the message on the node's outbox (or lose it). The message counts
// as sent once send returned, so a beat queued meanwhile never announces a
// message queued after it.
func (l *Link) Send(send func(seq uint64)) {
	seq := l.next.Add(1)
	send(seq)
	l.sent.Store(seq)
}

// Sent is the number of the last message sent.
func (l *Link) Sent() uint64 { return l.sent.Load() }

// Take reports whether seq is the next message; false is a gap (a message
// before it was lost), and then nothing is counted.
func (l *Link) Take(seq uint64) bool {
	if seq != l.received.Load()+1 {
		return false
	}
	l.received.Store(seq)
	return true
}

// TakeOnce is Take for a link whose sender may number its messages from 1
// again (a relay driver that lost its lease and took it back), where a
// message numbered no later than the last one taken is no proof of a copy:
// it is a copy (repeat; not a gap) when its bytes are those of the message
// taken under its number, among the last repeatWindow taken (a message
// numbered again with the same bytes carries nothing new either). Pub/sub
// delivers a message again when go-redis sends a PUBLISH again (its reply
// lost): the whole pipeline, before the next one, which holds at most one
// batch of the node's (publishBatch messages) unless publishing stalled
// for a lease TTL; an older copy counts as a gap.
func (l *Link) TakeOnce(seq uint64, msg []byte) (taken, repeat bool) {
	sum := maphash.Bytes(repeatSeed, msg)
	if r := l.received.Load(); seq > 0 && seq <= r && r-seq < repeatWindow {
		return false, l.taken[seq%repeatWindow] == sum
	}
	if !l.Take(seq) {
		return false, false
	}
	if l.taken == nil {
		l.taken = make([]uint64, repeatWindow)
	}
	l.taken[seq%repeatWindow] = sum
	return true, false
}

// repeatWindow is how many of the last messages taken TakeOnce knows a
// copy of, and repeatSeed the seed of the sums it keeps of them.
const repeatWindow = publishBatch

var repeatSeed = maphash.MakeSeed()

// Received is the number of the last message taken.
func (l *Link) Received() uint64 { return l.received.Load() }

// Missing reports whether the sender's word that it sent up to sent shows
// messages lost: the messages it sent before that word all arrived before
// it (the node's outbox and each subscription keep their order).
func (l *Link) Missing(sent uint64) bool { return sent > l.received.Load() }

// Flag is b as a boolean field: "1" or "0" (read it as string(field) ==
// "1").
func Flag(b bool) []byte {
	if b {
		return []byte("1")
	}
	return []byte("0")
}

// Uint reads a decimal field (0 when it is not one).
func Uint(b []byte) uint64 {
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}

// AppendUint appends v as a decimal field.
func AppendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }
