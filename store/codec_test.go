package store

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestCodecRoundTrip(t *testing.T) {
	r := Record{Seq: 7, Kind: 2, Platform: "discord", SessionKey: "agent:main", ChatID: "42",
		Payload: []byte("{}"), Received: time.Unix(1700000000, 123456789)}
	got, err := decodeRecord(seqKey(7), encodeRecord(&r))
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != r.Seq || got.Kind != r.Kind || got.Platform != r.Platform || got.SessionKey != r.SessionKey ||
		got.ChatID != r.ChatID || !bytes.Equal(got.Payload, r.Payload) || !got.Received.Equal(r.Received) {
		t.Fatalf("record round trip: %+v, want %+v", got, r)
	}
	o := Owner{Instance: "i", Conn: "c", ChatID: ""}
	if got, err := decodeOwner(encodeOwner(o)); err != nil || got != o {
		t.Fatalf("owner round trip: %+v, %v", got, err)
	}
	l := Lease{Holder: "h:1", Token: 1 << 40, Expires: time.Unix(5, 6)}
	if got, err := decodeLease(encodeLease(l)); err != nil || got.Holder != l.Holder || got.Token != l.Token || !got.Expires.Equal(l.Expires) {
		t.Fatalf("lease round trip: %+v, %v", got, err)
	}
	v, exp, err := decodeExpiring(encodeExpiring(time.Time{}, []byte("x")))
	if err != nil || string(v) != "x" || !exp.IsZero() {
		t.Fatalf("expiring round trip of the zero time: %q, %v, %v", v, exp, err)
	}
}

// FuzzDecode feeds arbitrary stored bytes (a damaged file, a key another
// program wrote) to every decoder: each must return errCorrupt or a value,
// never panic.
func FuzzDecode(f *testing.F) {
	r := Record{Kind: 1, Platform: "p", SessionKey: "s", ChatID: "c", Payload: []byte("x"), Received: time.Unix(1, 2)}
	f.Add(encodeRecord(&r))
	f.Add(encodeOwner(Owner{Instance: "i", Conn: "c", ChatID: "d"}))
	f.Add(encodeLease(Lease{Holder: "h", Token: 3}))
	f.Add(encodeExpiring(time.Unix(1, 0), []byte("v")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeRecord(seqKey(1), b)
		_, _ = decodeOwner(b)
		_, _ = decodeLease(b)
		_, _, _ = decodeExpiring(b)
		_, _ = decodeEntry("k", b)
	})
}

// FuzzStreamRecord feeds arbitrary field values (a stream entry another
// program or version wrote) to the redis backend's ledger record decoder:
// errCorrupt or a record, never a panic; a generation (field g) that is
// absent or empty reads as zero, and one that decodes reads as written.
func FuzzStreamRecord(f *testing.F) {
	f.Add("0-1", "1", "1700000000000000", "1700000000000001")
	f.Add("0-1", "1", "1", "")
	f.Add("0-1", "1", "1", "x")
	f.Add("0-1", "1", "1", "-1")
	f.Fuzz(func(t *testing.T, id, k, r, g string) {
		values := map[string]any{"k": k, "p": "p", "s": "s", "c": "c", "r": r, "d": "d"}
		if g != "" {
			values["g"] = g
		}
		rec, err := streamRecord(1, redis.XMessage{ID: id, Values: values})
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("decode error %v, want errCorrupt", err)
			}
			return
		}
		want := int64(0)
		if g != "" {
			if want, err = strconv.ParseInt(g, 10, 64); err != nil {
				t.Fatalf("generation %q decoded as %d, want errCorrupt", g, rec.Generation)
			}
		}
		if rec.Generation != want {
			t.Fatalf("generation %q decoded as %d, want %d", g, rec.Generation, want)
		}
	})
}
