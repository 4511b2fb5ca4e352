package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"connector/internal/clock"
)

// The embedded backend keeps one bbolt file, DataFile, in its data
// directory. Buckets:
//
//	meta         "version" -> formatVersion, "epoch" -> the epoch
//	ledger       one bucket per tenant: seq (8 bytes) -> record; the
//	             bucket's sequence is the tenant's last assigned seq
//	ledgerstats  tenant -> entries (8 bytes) bytes (8 bytes)
//	caps         key -> expiring value
//	owners       tenant (as a string) + session key -> expiring owner
//	leases       name -> lease; a released lease keeps its token
//	registry     one bucket per namespace: key -> entry; the bucket's
//	             sequence is the namespace's revision
//
// Tenant and namespace buckets are never deleted, so their sequences, and
// with them seqs and revisions, are never reused.

// DataFile is the embedded backend's file in its data directory.
const DataFile = "connector.db"

// formatVersion is the layout above; Open refuses a file of another.
const formatVersion = 1

var (
	bMeta        = []byte("meta")
	bLedger      = []byte("ledger")
	bLedgerStats = []byte("ledgerstats")
	bCaps        = []byte("caps")
	bOwners      = []byte("owners")
	bLeases      = []byte("leases")
	bRegistry    = []byte("registry")

	kVersion = []byte("version")
	kEpoch   = []byte("epoch")
)

// lockTimeout bounds how long Open waits for another process to release
// the data file.
const lockTimeout = time.Second

// embedded is the bbolt-backed Store. Writes on the hot paths (Append, Ack,
// owners, capabilities) go through a groupCommit, which gathers concurrent
// writers into one transaction and so one commit; the rest use DB.Update.
type embedded struct {
	dir   string // the data directory
	db    *bolt.DB
	group *groupCommit
	clock clock.Clock
	epoch string
	ps    *broker

	seqsMu sync.Mutex // guards seqs (not its values)
	seqs   map[string]*tenantSeqs

	closeOnce sync.Once
	stopSweep func()
	closeErr  error
}

func openEmbedded(ctx context.Context, dir string, clk clock.Clock) (*embedded, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", err)
	}
	path := filepath.Join(dir, DataFile)
	db, err := openData(path)
	if err != nil {
		return nil, err
	}
	e := &embedded{dir: dir, db: db, clock: clk, ps: newBroker(), seqs: make(map[string]*tenantSeqs)}
	if err := db.Update(e.init); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: initialize %s: %w", path, err)
	}
	e.group = startGroupCommit(db)
	e.stopSweep = startSweeper(clk, e.sweep)
	return e, nil
}

// init creates the buckets, checks the format and loads or creates the
// epoch.
func (e *embedded) init(tx *bolt.Tx) error {
	for _, name := range [][]byte{bMeta, bLedger, bLedgerStats, bCaps, bOwners, bLeases, bRegistry} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bMeta)
	if v := meta.Get(kVersion); v != nil {
		if len(v) != 8 || binary.BigEndian.Uint64(v) != formatVersion {
			return fmt.Errorf("data file format %x is not %d", v, formatVersion)
		}
	} else if err := meta.Put(kVersion, binary.BigEndian.AppendUint64(nil, formatVersion)); err != nil {
		return err
	}
	if v := meta.Get(kEpoch); v != nil {
		e.epoch = string(v)
		return nil
	}
	e.epoch = newEpoch()
	return meta.Put(kEpoch, []byte(e.epoch))
}

// view and update run fn unless ctx is done, and report a closed database
// as ErrClosed. batch is update through the group commit: fn may run more
// than once and must set, not accumulate, its results.
func (e *embedded) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	return inTx(ctx, e.db.View, fn)
}

func (e *embedded) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	return inTx(ctx, e.db.Update, fn)
}

func (e *embedded) batch(ctx context.Context, fn func(*bolt.Tx) error) error {
	return inTx(ctx, func(fn func(*bolt.Tx) error) error { return e.group.do(ctx, fn) }, fn)
}

func inTx(ctx context.Context, run func(func(*bolt.Tx) error) error, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return closedErr(run(fn))
}

func closedErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

func (e *embedded) Epoch() string              { return e.epoch }
func (e *embedded) Ledger() Ledger             { return embLedger{e} }
func (e *embedded) Capabilities() Capabilities { return expiringCaps{e} }
func (e *embedded) Owners() Owners             { return expiringOwners{e, e.clock} }
func (e *embedded) Leases() Leases             { return localLeases{e.clock, e.lease} }
func (e *embedded) PubSub() PubSub             { return e.ps }
func (e *embedded) Registry() Registry {
	return registry{e.writeRegistry, e.getRegistry, e.listRegistry, e.registryRevision}
}
func (e *embedded) Claims() Claims { return claims{claimPrefix, e.claim, holdExpiring(e), e.release} }

func (e *embedded) Close() error {
	e.closeOnce.Do(func() {
		e.stopSweep()
		e.ps.close()
		e.group.close()
		e.closeErr = errors.Join(e.releaseReservations(), e.db.Close())
	})
	return e.closeErr
}

// sweep deletes expired capabilities and owners (claims among them), in
// transactions of at most sweepBatch entries each through the group
// commit, so the other writes interleave with a long sweep. It stops
// between two transactions once ctx ends (the store closing).
func (e *embedded) sweep(ctx context.Context) {
	for _, name := range [][]byte{bCaps, bOwners} {
		for from := []byte{}; from != nil; {
			var next []byte
			err := e.batch(ctx, func(tx *bolt.Tx) error {
				var err error
				next, err = sweepFrom(tx.Bucket(name), from, e.clock.Now())
				return err
			})
			if err != nil {
				break
			}
			from = next
		}
	}
}

// sweepFrom deletes the expired entries among the sweepBatch of b from
// key from on, and returns (a copy of) the key the next batch starts at,
// or nil at the end of b.
func sweepFrom(b *bolt.Bucket, from []byte, now time.Time) (next []byte, err error) {
	var gone [][]byte
	c := b.Cursor()
	k, v := c.Seek(from)
	for n := 0; k != nil && n < sweepBatch; k, v = c.Next() {
		if _, exp, err := decodeExpiring(v); err != nil || expired(now, exp) {
			gone = append(gone, k)
		}
		n++
	}
	if k != nil {
		next = append([]byte{}, k...)
	}
	for _, k := range gone {
		if err := b.Delete(k); err != nil {
			return nil, err
		}
	}
	return next, nil
}

type embLedger struct{ e *embedded }

func (l embLedger) Append(ctx context.Context, tenant string, recs []Record) ([]uint64, error) {
	seqs, commit, err := l.Stage(ctx, tenant, recs)
	if err != nil {
		return nil, err
	}
	return seqs, commit()
}

// seqBlock is how many sequence numbers the embedded backend reserves for
// a tenant at a time (tenantSeqs).
const seqBlock = 4096

// tenantSeqs hands out one tenant's sequence numbers ahead of the commits
// that store their records. The tenant bucket's sequence is the highest
// number reserved, and a number is handed out only once its reservation
// is durable, so after a crash numbering resumes past every number a
// Stage returned. A clean Close lowers the stored sequence to the last
// number handed out, so numbers stay consecutive across a restart.
type tenantSeqs struct {
	mu       sync.Mutex // held from assigning numbers until their write is queued
	loaded   bool
	next     uint64 // the next number to hand out
	reserved uint64 // the highest number durably reserved
}

// tenantSeqs returns tenant's numbering, creating it.
func (e *embedded) tenantSeqs(tenant string) *tenantSeqs {
	e.seqsMu.Lock()
	defer e.seqsMu.Unlock()
	ts := e.seqs[tenant]
	if ts == nil {
		ts = &tenantSeqs{}
		e.seqs[tenant] = ts
	}
	return ts
}

// reserve makes sure n numbers from ts.next are durably reserved; ts.mu is
// held.
func (e *embedded) reserve(ctx context.Context, ts *tenantSeqs, tenant string, n int) error {
	if !ts.loaded {
		err := e.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bLedger).Bucket([]byte(tenant)); b != nil {
				ts.reserved = b.Sequence()
			}
			return nil
		})
		if err != nil {
			return closedErr(err)
		}
		ts.next, ts.loaded = ts.reserved+1, true
	}
	last := ts.next + uint64(n) - 1
	if last <= ts.reserved {
		return nil
	}
	want := last + seqBlock
	err := e.group.do(ctx, func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bLedger).CreateBucketIfNotExists([]byte(tenant))
		if err != nil || b.Sequence() >= want {
			return err
		}
		return b.SetSequence(want)
	})
	if err == nil {
		ts.reserved = want
	}
	return err
}

// releaseReservations lowers every tenant's stored sequence to the last
// number handed out; Close calls it once every write is committed.
func (e *embedded) releaseReservations() error {
	e.seqsMu.Lock()
	defer e.seqsMu.Unlock()
	return e.db.Update(func(tx *bolt.Tx) error {
		for tenant, ts := range e.seqs {
			ts.mu.Lock()
			last, loaded := ts.next-1, ts.loaded
			ts.mu.Unlock()
			b := tx.Bucket(bLedger).Bucket([]byte(tenant))
			if !loaded || b == nil || b.Sequence() <= last {
				continue
			}
			if err := b.SetSequence(last); err != nil {
				return err
			}
		}
		return nil
	})
}

func (l embLedger) Stage(ctx context.Context, tenant string, recs []Record) ([]uint64, func() error, error) {
	if err := checkName("tenant", tenant); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if len(recs) == 0 {
		return nil, committed, nil
	}
	e := l.e
	now := e.clock.Now()
	vals := make([][]byte, len(recs))
	var size int64
	for i := range recs {
		r := recs[i]
		r.Received = receivedAt(r.Received, now)
		vals[i] = encodeRecord(&r)
		size += int64(len(r.Payload))
	}
	ts := e.tenantSeqs(tenant)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err := e.reserve(ctx, ts, tenant, len(recs)); err != nil {
		return nil, nil, fmt.Errorf("store: append to tenant %q: %w", tenant, err)
	}
	first := ts.next
	seqs := make([]uint64, len(recs))
	for i := range seqs {
		seqs[i] = first + uint64(i)
	}
	w := write{err: make(chan error, 1), fn: func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bLedger).CreateBucketIfNotExists([]byte(tenant))
		if err != nil {
			return err
		}
		for i, v := range vals {
			if err := b.Put(seqKey(first+uint64(i)), v); err != nil {
				return err
			}
		}
		st := readStats(tx, tenant)
		st.Entries += len(vals)
		st.Bytes += size
		return writeStats(tx, tenant, st)
	}}
	// Queued under ts.mu, so the tenant's writes commit in seq order.
	if err := e.group.submit(ctx, w); err != nil {
		return nil, nil, fmt.Errorf("store: append to tenant %q: %w", tenant, err)
	}
	ts.next += uint64(len(recs))
	return seqs, func() error {
		if err := <-w.err; err != nil {
			return fmt.Errorf("store: append to tenant %q: %w", tenant, err)
		}
		return nil
	}, nil
}

func readStats(tx *bolt.Tx, tenant string) Stats {
	v := tx.Bucket(bLedgerStats).Get([]byte(tenant))
	if len(v) != 16 {
		return Stats{}
	}
	return Stats{Entries: int(binary.BigEndian.Uint64(v)), Bytes: int64(binary.BigEndian.Uint64(v[8:]))}
}

func writeStats(tx *bolt.Tx, tenant string, st Stats) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(st.Entries))
	v = binary.BigEndian.AppendUint64(v, uint64(st.Bytes))
	return tx.Bucket(bLedgerStats).Put([]byte(tenant), v)
}

func (l embLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]Record, error) {
	if err := checkReadArgs(tenant, max); err != nil {
		return nil, err
	}
	if afterSeq == math.MaxUint64 {
		return nil, ctx.Err()
	}
	var out []Record
	var bad *UnreadableRecord
	err := l.e.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bLedger).Bucket([]byte(tenant))
		if b == nil {
			return nil
		}
		c, size := b.Cursor(), int64(0)
		for k, v := c.Seek(seqKey(afterSeq + 1)); k != nil && !readDone(len(out), max, size, maxBytes); k, v = c.Next() {
			r, err := decodeRecord(k, v)
			if err != nil && len(k) == 8 {
				bad = &UnreadableRecord{Seq: binary.BigEndian.Uint64(k)}
				return nil
			} else if err != nil {
				return fmt.Errorf("record %x: %w", k, err)
			}
			r.Payload = append([]byte(nil), r.Payload...)
			out = append(out, r)
			size += int64(len(r.Payload))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read tenant %q: %w", tenant, err)
	}
	if bad != nil {
		return out, fmt.Errorf("store: read tenant %q: %w", tenant, bad)
	}
	return out, nil
}

func (l embLedger) Ack(ctx context.Context, tenant string, seqs ...uint64) (int, error) {
	if len(seqs) == 0 { // no commit
		return 0, cmp.Or(checkName("tenant", tenant), ctx.Err())
	}
	return l.AckAll(ctx, map[string][]uint64{tenant: seqs})
}

func (l embLedger) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	if err := checkAckAllArgs(acks); err != nil {
		return 0, err
	}
	var removed int
	err := l.e.batch(ctx, func(tx *bolt.Tx) error {
		removed = 0
		for tenant, seqs := range acks {
			n, err := ackTx(tx, tenant, seqs)
			if err != nil {
				return fmt.Errorf("tenant %q: %w", tenant, err)
			}
			removed += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: ack: %w", err)
	}
	return removed, nil
}

// ackTx removes seqs from tenant's log in tx and reports how many it
// removed. A record that does not decode goes too: it fails no batch of
// removals, whose other tenants' would fail with it.
func ackTx(tx *bolt.Tx, tenant string, seqs []uint64) (int, error) {
	b := tx.Bucket(bLedger).Bucket([]byte(tenant))
	if b == nil {
		return 0, nil
	}
	st := readStats(tx, tenant)
	removed, damaged := 0, false
	for _, seq := range seqs {
		k := seqKey(seq)
		v := b.Get(k)
		if v == nil {
			continue
		}
		r, err := decodeRecord(k, v)
		st.Bytes -= int64(len(r.Payload))
		damaged = damaged || err != nil
		st.Entries--
		if err := b.Delete(k); err != nil {
			return 0, err
		}
		removed++
	}
	if removed == 0 {
		return 0, nil
	}
	if damaged {
		st.Bytes = payloadBytes(b, nil)
	}
	return removed, writeStats(tx, tenant, st)
}

// payloadBytes sums the payload lengths of b's records after the key
// after (nil: all): a log's Bytes once a record that does not decode went,
// whose length is not known, so that its bytes do not stay counted.
func payloadBytes(b *bolt.Bucket, after []byte) (n int64) {
	c := b.Cursor()
	k, v := c.First()
	if after != nil {
		if k, v = c.Seek(after); bytes.Equal(k, after) {
			k, v = c.Next()
		}
	}
	for ; k != nil; k, v = c.Next() {
		r, _ := decodeRecord(k, v)
		n += int64(len(r.Payload))
	}
	return n
}

func (l embLedger) Trim(ctx context.Context, tenant string, bounds Bounds) ([]Dropped, error) {
	if err := checkName("tenant", tenant); err != nil {
		return nil, err
	}
	rule := bounds.at(l.e.clock.Now())
	var out []Dropped
	err := l.e.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bLedger).Bucket([]byte(tenant))
		if b == nil {
			return nil
		}
		st := readStats(tx, tenant)
		var keys [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			// A record that does not decode (a damaged data file) is older
			// than any cutoff, as the redis backend's trim takes one.
			r, err := decodeRecord(k, v)
			if err != nil && len(k) != 8 {
				return fmt.Errorf("record %x: %w", k, err)
			} else if err != nil {
				r.Seq = binary.BigEndian.Uint64(k)
			}
			if !rule.drop(st.Entries, st.Bytes, r.Received.UnixMicro()) {
				break
			}
			st.Entries--
			st.Bytes -= int64(len(r.Payload))
			if err != nil {
				st.Bytes = payloadBytes(b, k)
			}
			keys = append(keys, k)
			out = append(out, Dropped{Seq: r.Seq, Kind: r.Kind, Platform: r.Platform, Bytes: len(r.Payload), Received: r.Received})
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		if len(keys) == 0 {
			return nil
		}
		return writeStats(tx, tenant, st)
	})
	if err != nil {
		return nil, fmt.Errorf("store: trim tenant %q: %w", tenant, err)
	}
	return out, nil
}

func (l embLedger) Stats(ctx context.Context, tenant string) (Stats, error) {
	if err := checkName("tenant", tenant); err != nil {
		return Stats{}, err
	}
	var st Stats
	err := l.e.view(ctx, func(tx *bolt.Tx) error {
		st = readStats(tx, tenant)
		return nil
	})
	return st, err
}

// Forget drops nothing: a tenant's bucket and stats hold its numbering.
func (l embLedger) Forget(ctx context.Context, keep func(string) bool) (int, error) {
	return 0, l.e.view(ctx, func(*bolt.Tx) error { return nil })
}

func (l embLedger) Tenants(ctx context.Context) ([]string, error) {
	var out []string
	err := l.e.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bLedgerStats).ForEach(func(k, v []byte) error {
			if len(v) == 16 && binary.BigEndian.Uint64(v) > 0 {
				out = append(out, string(k))
			}
			return nil
		})
	})
	return out, err
}

// expKey is where the expiring value (a, b) is (expiringStore). An owner's
// key is the tenant as a length-prefixed string, then the session key, so
// no two pairs share a key.
func expKey(owner bool, a, b string) (bucket, key []byte) {
	if owner {
		return bOwners, append(appendString(nil, a), b...)
	}
	return bCaps, []byte(a)
}

func (e *embedded) putExpiring(ctx context.Context, owner bool, a, b string, value []byte, expires time.Time) error {
	bucket, k := expKey(owner, a, b)
	v := encodeExpiring(expires, value)
	return e.batch(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(k, v)
	})
}

func (e *embedded) putCapUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (stored bool, err error) {
	v := encodeExpiring(expires, value)
	err = e.batch(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bCaps)
		cur, exp, err := decodeExpiring(b.Get([]byte(key)))
		if stored = err != nil || expired(e.clock.Now(), exp) || !Later(cur, gen); !stored {
			return nil
		}
		return b.Put([]byte(key), v)
	})
	return stored && err == nil, err
}

// getLive returns a copy of the value.
func (e *embedded) getLive(ctx context.Context, owner bool, a, b string) (value []byte, ok bool, err error) {
	bucket, k := expKey(owner, a, b)
	err = e.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get(k)
		if v == nil {
			return nil
		}
		val, expires, err := decodeExpiring(v)
		if err != nil {
			return err
		}
		if !expired(e.clock.Now(), expires) {
			value, ok = append([]byte(nil), val...), true
		}
		return nil
	})
	return value, ok, err
}

func (e *embedded) delExpiring(ctx context.Context, owner bool, a, b string) error {
	bucket, k := expKey(owner, a, b)
	return e.batch(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete(k)
	})
}

// claim is claims' transaction: a group-committed one.
func (e *embedded) claim(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	k := []byte(key)
	var took bool
	err := e.batch(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bCaps)
		took = false
		if v := b.Get(k); v != nil {
			if _, exp, err := decodeExpiring(v); err == nil && !expired(e.clock.Now(), exp) && exp.After(held) {
				return nil
			}
		}
		took = true
		return b.Put(k, encodeExpiring(expires, nil))
	})
	return took && err == nil, err
}

// release is claims' compare-and-delete: a group-committed one. An
// unreadable claim goes.
func (e *embedded) release(ctx context.Context, key string, expires time.Time) error {
	k := []byte(key)
	return e.batch(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bCaps)
		if v := b.Get(k); v != nil {
			if _, exp, err := decodeExpiring(v); err == nil && exp.After(expires) {
				return nil
			}
		}
		return b.Delete(k)
	})
}

// lease is localLeases' transaction: a bbolt one.
func (e *embedded) lease(ctx context.Context, name string, write bool, fn func(Lease) (Lease, bool, error)) error {
	run := e.view
	if write {
		run = e.update
	}
	return run(ctx, func(tx *bolt.Tx) error {
		var cur Lease
		if v := tx.Bucket(bLeases).Get([]byte(name)); v != nil {
			var err error
			if cur, err = decodeLease(v); err != nil {
				return fmt.Errorf("lease %q: %w", name, err)
			}
		}
		l, put, err := fn(cur)
		if !put || err != nil {
			return err
		}
		if l == (Lease{}) {
			return tx.Bucket(bLeases).Delete([]byte(name))
		}
		return tx.Bucket(bLeases).Put([]byte(name), encodeLease(l))
	})
}

// writeRegistry is registry's write in a bbolt transaction. The namespace's
// bucket is created by its first change.
func (e *embedded) writeRegistry(ctx context.Context, namespace string, w regWrite) (rev uint64, applied bool, err error) {
	err = e.update(ctx, func(tx *bolt.Tx) error {
		reg := tx.Bucket(bRegistry)
		b := reg.Bucket([]byte(namespace))
		var stored, cur []byte
		if b != nil {
			stored = b.Get([]byte(w.key))
		}
		if stored != nil {
			ent, err := decodeEntry(w.key, stored)
			if err != nil && w.when != regPresent { // damaged: none, but a Delete removes it
				stored = nil
			}
			cur = ent.Value // nil for an empty value: stored says it is present
		}
		if applied = w.applies(cur, stored != nil); !applied {
			return nil
		}
		var err error
		if b == nil {
			if b, err = reg.CreateBucket([]byte(namespace)); err != nil {
				return err
			}
		}
		if rev, err = b.NextSequence(); err != nil {
			return err
		}
		if w.del {
			return b.Delete([]byte(w.key))
		}
		return b.Put([]byte(w.key), encodeEntry(rev, w.value))
	})
	return rev, applied && err == nil, err
}

func (e *embedded) getRegistry(ctx context.Context, namespace, key string) (ent Entry, ok bool, err error) {
	err = e.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bRegistry).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		v := b.Get([]byte(key))
		if v == nil {
			return nil
		}
		var err error
		ent, err = decodeEntry(key, v)
		ok = err == nil // a damaged one is passed over, as by List
		return nil
	})
	return ent, ok, err
}

func (e *embedded) listRegistry(ctx context.Context, namespace string) (out []Entry, rev uint64, err error) {
	err = e.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bRegistry).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		rev = b.Sequence()
		return b.ForEach(func(k, v []byte) error {
			if ent, err := decodeEntry(string(k), v); err == nil { // a damaged one is passed over, as on redis
				out = append(out, ent)
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

func (e *embedded) registryRevision(ctx context.Context, namespace string) (rev uint64, err error) {
	err = e.view(ctx, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bRegistry).Bucket([]byte(namespace)); b != nil {
			rev = b.Sequence()
		}
		return nil
	})
	return rev, err
}
