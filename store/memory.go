package store

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"connector/internal/clock"
)

// Memory is the in-process Store, for unit tests and benchmarks: one mutex
// over plain maps, and nothing survives Close.
type Memory struct {
	clock     clock.Clock
	epoch     string
	ps        *broker
	stopSweep func()

	mu      sync.Mutex
	closed  bool
	ledgers map[string]*memLog
	caps    map[memKey]expiring // by the capability key and ""
	owners  map[memKey]expiring // by tenant and session key: encodeOwner
	leases  map[string]Lease
	reg     map[string]*memNamespace
}

var _ Store = (*Memory)(nil)

// memLog is one tenant's ledger: records in sequence order.
type memLog struct {
	recs  []Record
	seq   uint64
	bytes int64
}

// expiring is a value of expiringStore with its expiry.
type expiring struct {
	value   []byte
	expires time.Time
}

// memKey names an expiring value (expiringStore's a, b).
type memKey struct{ a, b string }

type memNamespace struct {
	rev     uint64
	entries map[string]Entry
}

// NewMemory returns an empty in-process store on clock now (nil means
// time.Now). Close it: it runs a sweeper goroutine that deletes expired
// capabilities and owners.
func NewMemory(clk clock.Clock) *Memory {
	clk = cmp.Or(clk, clock.System)
	m := &Memory{
		clock: clk, epoch: newEpoch(), ps: newBroker(),
		ledgers: make(map[string]*memLog), caps: make(map[memKey]expiring),
		owners: make(map[memKey]expiring), leases: make(map[string]Lease),
		reg: make(map[string]*memNamespace),
	}
	m.stopSweep = startSweeper(clk, func(context.Context) { m.sweep() })
	return m
}

// lock takes the store's mutex unless the call's arguments are bad (argErr,
// from their check), ctx is done or the store is closed.
func (m *Memory) lock(ctx context.Context, argErr error) error {
	if argErr != nil {
		return argErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Epoch implements Store.
func (m *Memory) Epoch() string { return m.epoch }

// Ledger implements Store.
func (m *Memory) Ledger() Ledger { return memLedger{m} }

// Capabilities implements Store.
func (m *Memory) Capabilities() Capabilities { return expiringCaps{m} }

// Owners implements Store.
func (m *Memory) Owners() Owners { return expiringOwners{m, m.clock} }

// Leases implements Store.
func (m *Memory) Leases() Leases { return localLeases{m.clock, m.lease} }

// PubSub implements Store.
func (m *Memory) PubSub() PubSub { return m.ps }

// Registry implements Store.
func (m *Memory) Registry() Registry {
	return registry{m.writeRegistry, m.getRegistry, m.listRegistry, m.registryRevision}
}

// Claims implements Store.
func (m *Memory) Claims() Claims { return claims{claimPrefix, m.claim, holdExpiring(m), m.release} }

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.stopSweep()
	m.ps.close()
	return nil
}

// sweep deletes expired capabilities and owners.
func (m *Memory) sweep() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for _, exp := range []map[memKey]expiring{m.caps, m.owners} {
		maps.DeleteFunc(exp, func(_ memKey, e expiring) bool { return expired(now, e.expires) })
	}
}

// memLedger and the other views below are the store under each interface.
type memLedger struct{ *Memory }

func (m memLedger) Append(ctx context.Context, tenant string, recs []Record) ([]uint64, error) {
	if err := m.lock(ctx, checkName("tenant", tenant)); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if len(recs) == 0 {
		return nil, nil
	}
	lg := m.ledgers[tenant]
	if lg == nil {
		lg = &memLog{}
		m.ledgers[tenant] = lg
	}
	now := m.clock.Now()
	seqs := make([]uint64, len(recs))
	for i, r := range recs {
		lg.seq++
		r.Seq = lg.seq
		r.Payload = slices.Clone(r.Payload)
		r.Received = receivedAt(r.Received, now)
		lg.recs = append(lg.recs, r)
		lg.bytes += int64(len(r.Payload))
		seqs[i] = r.Seq
	}
	return seqs, nil
}

func (m memLedger) Stage(ctx context.Context, tenant string, recs []Record) ([]uint64, func() error, error) {
	return staged(m.Append(ctx, tenant, recs))
}

func (m memLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]Record, error) {
	if err := m.lock(ctx, checkReadArgs(tenant, max)); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	lg := m.ledgers[tenant]
	if lg == nil {
		return nil, nil
	}
	i := sort.Search(len(lg.recs), func(i int) bool { return lg.recs[i].Seq > afterSeq })
	var out []Record
	for size := int64(0); i < len(lg.recs) && !readDone(len(out), max, size, maxBytes); i++ {
		r := lg.recs[i]
		r.Payload = slices.Clone(r.Payload)
		out = append(out, r)
		size += int64(len(r.Payload))
	}
	return out, nil
}

func (m memLedger) Ack(ctx context.Context, tenant string, seqs ...uint64) (int, error) {
	return m.AckAll(ctx, map[string][]uint64{tenant: seqs})
}

func (m memLedger) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	if err := m.lock(ctx, checkAckAllArgs(acks)); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	removed := 0
	for tenant, seqs := range acks {
		lg := m.ledgers[tenant]
		if lg == nil {
			continue
		}
		removed += lg.remove(seqs)
	}
	return removed, nil
}

// remove deletes the records numbered seqs (in any order; repeated and
// unknown numbers are ignored) in one pass over the log, and reports how
// many it deleted: a flush of k acks costs one shift of the log, not k
// (a record deleted at a time moved every later one, each time).
func (lg *memLog) remove(seqs []uint64) int {
	at := make([]int, 0, 16) // the indexes to delete; on the stack for a small flush
	for _, seq := range seqs {
		if i, found := sort.Find(len(lg.recs), func(i int) int { return cmp.Compare(seq, lg.recs[i].Seq) }); found {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return 0
	}
	slices.Sort(at)
	at = slices.Compact(at)
	kept, next := at[0], 0
	for i := at[0]; i < len(lg.recs); i++ {
		if next < len(at) && at[next] == i {
			lg.bytes -= int64(len(lg.recs[i].Payload))
			next++
			continue
		}
		lg.recs[kept] = lg.recs[i]
		kept++
	}
	clear(lg.recs[kept:])
	lg.recs = lg.recs[:kept]
	return len(at)
}

func (m memLedger) Trim(ctx context.Context, tenant string, b Bounds) ([]Dropped, error) {
	if err := m.lock(ctx, checkName("tenant", tenant)); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	lg := m.ledgers[tenant]
	if lg == nil {
		return nil, nil
	}
	rule := b.at(m.clock.Now())
	n := 0
	var out []Dropped
	for n < len(lg.recs) && rule.drop(len(lg.recs)-n, lg.bytes, lg.recs[n].Received.UnixMicro()) {
		r := lg.recs[n]
		lg.bytes -= int64(len(r.Payload))
		out = append(out, Dropped{Seq: r.Seq, Kind: r.Kind, Platform: r.Platform, Bytes: len(r.Payload), Received: r.Received})
		n++
	}
	lg.recs = slices.Delete(lg.recs, 0, n)
	return out, nil
}

func (m memLedger) Stats(ctx context.Context, tenant string) (Stats, error) {
	if err := m.lock(ctx, checkName("tenant", tenant)); err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	lg := m.ledgers[tenant]
	if lg == nil {
		return Stats{}, nil
	}
	return Stats{Entries: len(lg.recs), Bytes: lg.bytes}, nil
}

// Forget drops nothing: a tenant's entry holds its numbering.
func (m memLedger) Forget(ctx context.Context, keep func(string) bool) (int, error) {
	if err := m.lock(ctx, nil); err != nil {
		return 0, err
	}
	m.mu.Unlock()
	return 0, nil
}

func (m memLedger) Tenants(ctx context.Context) ([]string, error) {
	if err := m.lock(ctx, nil); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []string
	for t, lg := range m.ledgers {
		if len(lg.recs) > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// expMap is the map of the owners, or of the capabilities.
func (m *Memory) expMap(owner bool) map[memKey]expiring {
	if owner {
		return m.owners
	}
	return m.caps
}

func (m *Memory) putExpiring(ctx context.Context, owner bool, a, b string, value []byte, expires time.Time) error {
	if err := m.lock(ctx, nil); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.expMap(owner)[memKey{a, b}] = expiring{value: slices.Clone(value), expires: expires}
	return nil
}

func (m *Memory) putCapUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (bool, error) {
	if err := m.lock(ctx, nil); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	if cur, ok := m.caps[memKey{key, ""}]; ok && !expired(m.clock.Now(), cur.expires) && Later(cur.value, gen) {
		return false, nil
	}
	m.caps[memKey{key, ""}] = expiring{value: slices.Clone(value), expires: expires}
	return true, nil
}

func (m *Memory) getLive(ctx context.Context, owner bool, a, b string) ([]byte, bool, error) {
	if err := m.lock(ctx, nil); err != nil {
		return nil, false, err
	}
	defer m.mu.Unlock()
	e, ok := m.expMap(owner)[memKey{a, b}]
	if !ok || expired(m.clock.Now(), e.expires) {
		return nil, false, nil
	}
	return slices.Clone(e.value), true, nil
}

func (m *Memory) delExpiring(ctx context.Context, owner bool, a, b string) error {
	if err := m.lock(ctx, nil); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.expMap(owner), memKey{a, b})
	return nil
}

// claim is claims' transaction: the store's mutex.
func (m *Memory) claim(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	if err := m.lock(ctx, nil); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	k := memKey{a: key}
	if e, ok := m.caps[k]; ok && !expired(m.clock.Now(), e.expires) && e.expires.After(held) {
		return false, nil
	}
	m.caps[k] = expiring{expires: expires}
	return true, nil
}

// release is claims' compare-and-delete: the store's mutex.
func (m *Memory) release(ctx context.Context, key string, expires time.Time) error {
	if err := m.lock(ctx, nil); err != nil {
		return err
	}
	defer m.mu.Unlock()
	k := memKey{a: key}
	if e, ok := m.caps[k]; ok && !e.expires.After(expires) {
		delete(m.caps, k)
	}
	return nil
}

// lease is localLeases' transaction: the store's mutex.
func (m *Memory) lease(ctx context.Context, name string, _ bool, fn func(Lease) (Lease, bool, error)) error {
	if err := m.lock(ctx, nil); err != nil {
		return err
	}
	defer m.mu.Unlock()
	l, put, err := fn(m.leases[name])
	switch {
	case !put || err != nil:
	case l == (Lease{}):
		delete(m.leases, name)
	default:
		m.leases[name] = l
	}
	return err
}

// writeRegistry and the other registry functions below are registry's,
// under the store's mutex.
func (m *Memory) writeRegistry(ctx context.Context, namespace string, w regWrite) (uint64, bool, error) {
	if err := m.lock(ctx, nil); err != nil {
		return 0, false, err
	}
	defer m.mu.Unlock()
	ns := m.reg[namespace]
	if ns == nil {
		ns = &memNamespace{entries: make(map[string]Entry)}
	}
	cur, ok := ns.entries[w.key]
	if !w.applies(cur.Value, ok) {
		return 0, false, nil
	}
	m.reg[namespace] = ns // created by its first change, as on the embedded backend
	ns.rev++
	if w.del {
		delete(ns.entries, w.key)
	} else {
		ns.entries[w.key] = Entry{Key: w.key, Value: slices.Clone(w.value), Rev: ns.rev}
	}
	return ns.rev, true, nil
}

func (m *Memory) getRegistry(ctx context.Context, namespace, key string) (Entry, bool, error) {
	if err := m.lock(ctx, nil); err != nil {
		return Entry{}, false, err
	}
	defer m.mu.Unlock()
	ns := m.reg[namespace]
	if ns == nil {
		return Entry{}, false, nil
	}
	e, ok := ns.entries[key]
	e.Value = slices.Clone(e.Value)
	return e, ok, nil
}

func (m *Memory) listRegistry(ctx context.Context, namespace string) ([]Entry, uint64, error) {
	if err := m.lock(ctx, nil); err != nil {
		return nil, 0, err
	}
	defer m.mu.Unlock()
	ns := m.reg[namespace]
	if ns == nil {
		return nil, 0, nil
	}
	out := make([]Entry, 0, len(ns.entries))
	for _, e := range ns.entries {
		e.Value = slices.Clone(e.Value)
		out = append(out, e)
	}
	return out, ns.rev, nil
}

func (m *Memory) registryRevision(ctx context.Context, namespace string) (uint64, error) {
	if err := m.lock(ctx, nil); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	if ns := m.reg[namespace]; ns != nil {
		return ns.rev, nil
	}
	return 0, nil
}
