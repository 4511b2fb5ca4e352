package cluster

import (
	"encoding/binary"
	"net"
)

// RefBytes is the size from which Gather writes a field by reference
// rather than copying it.
const RefBytes = 4 << 10

// Gather collects messages, encoded as Encode encodes them, for one
// vectored write (net.Buffers, writev): their small parts are copied into
// one buffer, their fields of RefBytes or more are referenced, so those
// must stay unchanged until the write. The zero Gather is empty.
type Gather struct {
	Bufs  net.Buffers // what to write, in order
	small []byte      // the copied parts; Bufs holds slices of it
	start int         // small[start:] is not in Bufs yet
}

// EncodedLen is the length of a message from instance from carrying
// fields, as Send publishes it and Gather.Encode adds it.
func EncodedLen(from string, fields ...[]byte) int {
	n := 1 + uvarintLen(len(from)) + len(from)
	for _, f := range fields {
		n += uvarintLen(len(f)) + len(f)
	}
	return n
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return len(binary.AppendUvarint(b[:0], uint64(n)))
}

// Uvarint adds v as a uvarint.
func (g *Gather) Uvarint(v uint64) { g.small = binary.AppendUvarint(g.small, v) }

// Encode adds the message of type typ from instance from carrying fields,
// as Send publishes it.
func (g *Gather) Encode(typ byte, from string, fields ...[]byte) {
	g.small = append(g.small, typ)
	g.Uvarint(uint64(len(from)))
	g.small = append(g.small, from...)
	for _, f := range fields {
		g.Uvarint(uint64(len(f)))
		g.Bytes(f)
	}
}

// Bytes adds b, by reference when it is RefBytes or more.
func (g *Gather) Bytes(b []byte) {
	if len(b) < RefBytes {
		g.small = append(g.small, b...)
		return
	}
	g.cut()
	g.Bufs = append(g.Bufs, b)
}

// cut ends the copied part so far as one buffer of Bufs. Growing small
// later leaves the buffers already in Bufs as they are.
func (g *Gather) cut() {
	if len(g.small) > g.start {
		g.Bufs = append(g.Bufs, g.small[g.start:])
		g.start = len(g.small)
	}
}

// Done returns the buffers to write, Bufs with the last copied part.
func (g *Gather) Done() net.Buffers {
	g.cut()
	return g.Bufs
}

// Reset empties g for the next write, keeping its memory.
func (g *Gather) Reset() {
	clear(g.Bufs[:cap(g.Bufs)])
	g.Bufs, g.small, g.start = g.Bufs[:0], g.small[:0], 0
}
