package store

import (
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

func readTime(b []byte) (time.Time, []byte, error) {
	if len(b) < 12 {
		return time.Time{}, nil, errCorrupt
	}
	sec := int64(binary.BigEndian.Uint64(b))
	nsec := binary.BigEndian.Uint32(b[8:])
	if nsec >= 1e9 {
		return time.Time{}, nil, errCorrupt
	}
	return time.Unix(sec, int64(nsec)), b[12:], nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readString(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, errCorrupt
	}
	b = b[k:]
	return string(b[:n]), b[n:], nil
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
	r := Record{Seq: binary.BigEndian.Uint64(key), Kind: val[0]}
	var err error
	b := val[1:]
	if r.Received, b, err = readTime(b); err != nil {
		return Record{}, err
	}
	if r.Platform, b, err = readString(b); err != nil {
		return Record{}, err
	}
	if r.SessionKey, b, err = readString(b); err != nil {
		return Record{}, err
	}
	if r.ChatID, b, err = readString(b); err != nil {
		return Record{}, err
	}
	r.Payload = b
	return r, nil
}

func encodeExpiring(expires time.Time, value []byte) []byte {
	return append(appendTime(make([]byte, 0, 12+len(value)), expires), value...)
}

// decodeExpiring returns the value and expiry; value aliases b.
func decodeExpiring(b []byte) (value []byte, expires time.Time, err error) {
	expires, value, err = readTime(b)
	return value, expires, err
}

func encodeOwner(o Owner) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen16+len(o.Instance)+len(o.Conn)+len(o.ChatID))
	b = appendString(b, o.Instance)
	b = appendString(b, o.Conn)
	return appendString(b, o.ChatID)
}

func decodeOwner(b []byte) (Owner, error) {
	var o Owner
	var err error
	if o.Instance, b, err = readString(b); err != nil {
		return Owner{}, err
	}
	if o.Conn, b, err = readString(b); err != nil {
		return Owner{}, err
	}
	if o.ChatID, b, err = readString(b); err != nil {
		return Owner{}, err
	}
	if len(b) != 0 {
		return Owner{}, errCorrupt
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
	l := Lease{Token: binary.BigEndian.Uint64(b)}
	var err error
	if l.Expires, b, err = readTime(b[8:]); err != nil {
		return Lease{}, err
	}
	l.Holder = string(b)
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
