// Package clustermsg is the encoding of the messages connector instances
// send each other over store.PubSub: one type byte, then fields, each a
// uvarint length and its bytes. The relay's cluster and the nexscope rooms
// both speak it; each defines its own type bytes and field counts.
package clustermsg

import "encoding/binary"

// Encode returns a message of type typ carrying fields in order.
func Encode(typ byte, fields ...[]byte) []byte {
	n := 1
	for _, f := range fields {
		n += binary.MaxVarintLen32 + len(f)
	}
	b := make([]byte, 1, n)
	b[0] = typ
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// Decode splits msg into its type and exactly n fields, which alias msg;
// ok is false for a malformed message (too few fields, trailing bytes).
func Decode(msg []byte, n int) (typ byte, fields [][]byte, ok bool) {
	if len(msg) == 0 {
		return 0, nil, false
	}
	typ, rest := msg[0], msg[1:]
	fields = make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < l {
			return 0, nil, false
		}
		fields = append(fields, rest[k:k+int(l)])
		rest = rest[k+int(l):]
	}
	return typ, fields, len(rest) == 0
}
