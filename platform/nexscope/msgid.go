package nexscope

import (
	"crypto/rand"
	"encoding/binary"
)

// crockford is the ULID alphabet.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newMsgID returns a ULID (48-bit millisecond time, 80 random bits, 26
// Crockford base32 characters) for a msg the bot sends.
func (p *Platform) newMsgID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(p.nowMs())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	var out [26]byte
	// 128 bits as 26 base32 digits: the first digit carries the top 3 bits.
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
