package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The binary layouts the embedded backend keeps on disk and the redis
// backend keeps in string values. Integers are big-endian; a string is a
// uvarint length and its bytes; a time is Unix seconds (int64) and
// nanoseconds (uint32), exact for every time.Time.
//
//	record  (embedded; key: seq as 8 bytes)  kind(1) received(12) platform session chat payload(rest)
//	expiring value (capability, owner)       expires(12) value(rest)
//	owner                                    instance conn chat
//	lease   (embedded)                       token(8) expires(12) holder(rest)
//	registry entry                           rev(8) value(rest)

// errCorrupt reports stored bytes that do not decode: a damaged data file
// or a key another program wrote.
var errCorrupt = errors.New("store: corrupt stored value")

func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}

// decoder reads a layout's fields in order: the first that does not decode
// sets err, and every read after it returns the zero value.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) time() time.Time {
	if d.err != nil || len(d.b) < 12 || binary.BigEndian.Uint32(d.b[8:]) >= 1e9 {
		d.err = cmp.Or(d.err, errCorrupt)
		return time.Time{}
	}
	t := time.Unix(int64(binary.BigEndian.Uint64(d.b)), int64(binary.BigEndian.Uint32(d.b[8:])))
	d.b = d.b[12:]
	return t
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func (d *decoder) string() string {
	n, k := binary.Uvarint(d.b)
	if d.err != nil || k <= 0 || n > uint64(len(d.b)-k) {
		d.err = cmp.Or(d.err, errCorrupt)
		return ""
	}
	v := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return v
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func encodeRecord(r *Record) []byte {
	b := make([]byte, 0, 1+12+3*binary.MaxVarintLen16+len(r.Platform)+len(r.SessionKey)+len(r.ChatID)+len(r.Payload))
	b = append(b, r.Kind)
	b = appendTime(b, r.Received)
	b = appendString(b, r.Platform)
	b = appendString(b, r.SessionKey)
	b = appendString(b, r.ChatID)
	return append(b, r.Payload...)
}

// decodeRecord decodes the record stored under key. Its Payload aliases val.
func decodeRecord(key, val []byte) (Record, error) {
	if len(key) != 8 || len(val) < 1 {
		return Record{}, errCorrupt
	}
	d := decoder{b: val[1:]}
	r := Record{Seq: binary.BigEndian.Uint64(key), Kind: val[0], Received: d.time(), Platform: d.string(), SessionKey: d.string(), ChatID: d.string()}
	if d.err != nil {
		return Record{}, d.err
	}
	r.Payload = d.b
	return r, nil
}

func encodeExpiring(expires time.Time, value []byte) []byte {
	return append(appendTime(make([]byte, 0, 12+len(value)), expires), value...)
}

// decodeExpiring returns the value and expiry; value aliases b.
func decodeExpiring(b []byte) (value []byte, expires time.Time, err error) {
	d := decoder{b: b}
	expires = d.time()
	return d.b, expires, d.err
}

func encodeOwner(o Owner) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen16+len(o.Instance)+len(o.Conn)+len(o.ChatID))
	b = appendString(b, o.Instance)
	b = appendString(b, o.Conn)
	return appendString(b, o.ChatID)
}

func decodeOwner(b []byte) (Owner, error) {
	d := decoder{b: b}
	o := Owner{Instance: d.string(), Conn: d.string(), ChatID: d.string()}
	if d.err != nil || len(d.b) != 0 {
		return Owner{}, cmp.Or(d.err, errCorrupt)
	}
	return o, nil
}

func encodeLease(l Lease) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+12+len(l.Holder)), l.Token)
	b = appendTime(b, l.Expires)
	return append(b, l.Holder...)
}

func decodeLease(b []byte) (Lease, error) {
	if len(b) < 8 {
		return Lease{}, errCorrupt
	}
	d := decoder{b: b[8:]}
	l := Lease{Token: binary.BigEndian.Uint64(b), Expires: d.time()}
	if d.err != nil {
		return Lease{}, d.err
	}
	l.Holder = string(d.b)
	return l, nil
}

func encodeEntry(rev uint64, value []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), rev), value...)
}

// decodeEntry decodes a registry value stored under key; Value is copied.
// A revision of 2^59 or more is no entry's (another program's value:
// registryRevLua).
func decodeEntry(key string, b []byte) (Entry, error) {
	if len(b) < 8 || b[0] >= 8 {
		return Entry{}, fmt.Errorf("%w: registry entry %q", errCorrupt, key)
	}
	return Entry{Key: key, Rev: binary.BigEndian.Uint64(b), Value: append([]byte(nil), b[8:]...)}, nil
}
