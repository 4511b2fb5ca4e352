package nexscope

import (
	"sync"
	"sync/atomic"
)

// chunk is one file chunk shared by the send queues of all its recipients,
// or a frame a member sent, read for the room's home on another instance
// (forward), or a message read from another instance's direct stream. Its buffer comes from a pool and goes back once every holder
// (a recipient's writer, the member's reader, a direct stream) released it,
// so streaming a file allocates nothing per chunk in steady state.
type chunk struct {
	buf  []byte
	refs atomic.Int32
}

// maxPooledChunk is the largest buffer kept for reuse (chunks are 64 KiB
// by recommendation; larger ones are rare and left to the GC).
const maxPooledChunk = 1 << 20

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// newChunk copies data into a pooled chunk that refs recipients will release.
func newChunk(data []byte, refs int) *chunk {
	c := chunkPool.Get().(*chunk)
	c.buf = append(c.buf[:0], data...)
	c.refs.Store(int32(refs))
	return c
}

// Retain adds a reference: one more Release before the buffer goes back
// (cluster.Buffer).
func (c *chunk) Retain() { c.refs.Add(1) }

// Release implements wsconn.Releaser and cluster.Buffer: it drops one recipient's reference;
// the last one returns the buffer. A chunk that is never released (its
// queue vanished mid-close) is simply collected.
func (c *chunk) Release() {
	if c.refs.Add(-1) == 0 && cap(c.buf) <= maxPooledChunk {
		chunkPool.Put(c)
	}
}
