package relay

import (
	"hash/fnv"
	"io"
	"strconv"

	"connector/internal/cluster"
)

// tally sums, for the links between one instance and the tenant's driver,
// what both ends must agree on, so that one message a beat stands for
// every socket: the links, and the sum of a digest of each (linkDigest:
// its connection, generation, platforms and idleness, and one counter, the
// acks sent in a roster, the frames sent in a tally). Each end sends it
// after the messages it counts, which arrive before it (the node's outbox
// and each subscription keep their order), so an idle fleet's two ends
// always agree, and a lost serve, detach, ack, frame or broken link makes
// them differ until it is made up.
type tally struct {
	links  uint64
	digest uint64
}

// add counts one link: hash is its seatHash, count its counter.
func (t *tally) add(hash, count uint64) {
	t.links++
	t.digest += linkDigest(hash, count)
}

// fields are t as a message's fields.
func (t tally) fields() [][]byte {
	return [][]byte{cluster.AppendUint(nil, t.links), cluster.AppendUint(nil, t.digest)}
}

// tallyOf reads a tally from a message's fields (t.fields()).
func tallyOf(fields [][]byte) tally {
	return tally{links: cluster.Uint(fields[0]), digest: cluster.Uint(fields[1])}
}

// seatHash is a 64-bit FNV-1a hash of what a socket's serve announces:
// its connection, its link's generation, its platforms and whether it
// went idle, each field ended by 0xff.
func seatHash(conn string, gen uint64, platforms string, idle bool) uint64 {
	h := fnv.New64a()
	fields := []string{conn, strconv.FormatUint(gen, 10), platforms}
	if idle {
		fields = append(fields, "1")
	}
	for _, f := range fields {
		_, _ = io.WriteString(h, f+"\xff")
	}
	return h.Sum64()
}

// linkDigest mixes a link's seatHash with one of its counters (splitmix64's
// finalizer), so that counters that differ on two links do not cancel out
// in a tally's sum.
func linkDigest(hash, count uint64) uint64 {
	x := hash + count*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
