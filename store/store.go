// Package store is the connector's durable state: the per-tenant inbound
// ledger the relay replays from, the capability vault's values, session
// owners, leases, cross-instance notifications and a small registry. It is the
// layer that makes "nothing confirmed to a platform is ever lost" hold across
// restarts (the embedded backend) and across instances (the Redis backend).
//
// A Store bundles one small interface per kind of state:
//
//   - Ledger: an append-only inbound log per tenant. Append returns only once
//     the records are durable and gives each a per-tenant sequence number
//     that is never reused; Stage gives the numbers first and commits after;
//     gateways acknowledge, bounds trim the oldest.
//   - Capabilities: opaque values with an expiry (the vault's backing store).
//   - Owners: which instance and connection own a session, with a TTL.
//   - Leases: named, exclusive, expiring leases with fencing tokens.
//   - PubSub: at-most-once notifications between instances.
//   - Registry: namespaced key/values with a revision per namespace.
//
// Three backends implement it, chosen by Config.Backend:
//
//   - "embedded" (the default): go.etcd.io/bbolt in Config.Path. A write is
//     committed with fsync before it returns; concurrent writers share one
//     commit (group commit, batch.go). One process owns the data directory.
//   - "redis": github.com/redis/go-redis/v9 against one Redis 6.2+
//     primary (found directly or through Sentinel) or a Redis Cluster,
//     shared by any number of connector instances. A write is as durable as
//     the server's persistence settings make it, and with RedisMinReplicas
//     it returns only once that many replicas have it (see
//     docs/durability.md); concurrent ledger and pub/sub calls share one
//     round trip per server (a pipeline, batch.go).
//   - "memory": in-process maps for unit tests and benchmarks; nothing
//     survives Close.
//
// Expiry of capabilities and owners is judged by Config.Clock on every
// backend, so tests control time. Leases follow Config.Clock on the memory and
// embedded backends and the Redis server's clock on the redis backend.
//
// The conformance suite every backend passes is in store/storetest.
package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"connector/internal/clock"
)

// Store is the connector's durable state. Its methods are safe for
// concurrent use; after Close every call fails with ErrClosed.
type Store interface {
	// Epoch identifies the data set: a random id created when the store was
	// first initialized and kept with the data. It is the same across
	// restarts and across instances sharing a Redis, and different after
	// the data is wiped, so "<epoch>-<seq>" names one ledger record for good
	// (the relay's bufferId).
	Epoch() string
	// Ledger is the per-tenant inbound log.
	Ledger() Ledger
	// Capabilities is the capability vault's backing store.
	Capabilities() Capabilities
	// Owners records which connection owns a session.
	Owners() Owners
	// Leases are named exclusive leases with fencing tokens.
	Leases() Leases
	// PubSub carries notifications between instances.
	PubSub() PubSub
	// Registry is a namespaced key/value store with revisions.
	Registry() Registry
	// Claims are expiring markers one caller holds at a time.
	Claims() Claims
	// Close releases the store: it ends every subscription and, for the
	// embedded backend, unlocks the data directory; on the redis backend
	// a call under way fails. It is idempotent.
	Close() error
}

// Ledger is an append-only log of inbound records per tenant. A tenant
// never sees another tenant's records: every method is scoped to one.
type Ledger interface {
	// Append stores recs at the end of tenant's log and returns their
	// sequence numbers, in the order of recs. Sequence numbers start at 1,
	// grow by one per record and are never reused, even after acks, trims,
	// restarts or from another instance; only a Stage whose records were
	// not stored leaves a gap, and so does the redis backend under a new
	// primary or for a tenant whose keys it lost (appendScript,
	// docs/durability.md). Append returns only once the records are
	// durable. The store copies recs; their Seq is ignored, and a zero
	// Received is set to the store's clock. Received is kept to the
	// microsecond.
	Append(ctx context.Context, tenant string, recs []Record) ([]uint64, error)
	// Stage is Append in two steps, for a caller that acts on the records
	// before they are durable (the relay sends them to a connected gateway
	// while the commit is under way). It assigns recs' sequence numbers at
	// once, in the order of the tenant's Stage and Append calls, and
	// returns commit, which returns nil once the records are durable, or
	// the error that kept them from being stored. A sequence number Stage
	// returned is never assigned again, even when commit fails or the
	// process dies before the records are durable. The redis backend, whose
	// numbers come from the server, stores the records (and with
	// Config.RedisMinReplicas has them replicated) before Stage returns,
	// and its commit returns nil.
	Stage(ctx context.Context, tenant string, recs []Record) (seqs []uint64, commit func() error, err error)
	// Read returns up to max (> 0) of tenant's records with a sequence
	// number above afterSeq, in sequence order. With maxBytes above 0 it
	// also stops after the record that takes the payload bytes it returns
	// to maxBytes or past it: a read holds less than maxBytes and one
	// record, and one cut short so returns at least maxBytes (and at least
	// one record). At a record that does not
	// decode it stops and returns those before it with an
	// *UnreadableRecord; the redis backend so at a stream entry it did not
	// write, which it removes first.
	Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]Record, error)
	// Ack removes tenant's records with the given sequence numbers and
	// reports how many it removed. Unknown numbers (acknowledged before,
	// trimmed, never assigned) are ignored.
	Ack(ctx context.Context, tenant string, seqs ...uint64) (removed int, err error)
	// AckAll is Ack for several tenants at once: it removes acks[tenant]
	// from each tenant's log in one commit (embedded) or one round trip
	// (redis), and reports how many records it removed in all.
	AckAll(ctx context.Context, acks map[string][]uint64) (removed int, err error)
	// Trim drops tenant's oldest records while the log exceeds b, and
	// returns what it dropped, oldest first, so the caller can log and
	// count it. A record alone larger than b.MaxBytes is dropped too.
	Trim(ctx context.Context, tenant string, b Bounds) ([]Dropped, error)
	// Stats reports the size of tenant's log.
	Stats(ctx context.Context, tenant string) (Stats, error)
	// Tenants lists, sorted, the tenants whose log holds records: the
	// ledgers to recover after a restart.
	Tenants(ctx context.Context) ([]string, error)
	// Forget drops what the store keeps across tenants for each tenant
	// keep rejects (a deleted one) whose log holds no records, and reports
	// how many it dropped; their numbering is kept, so a tenant made again
	// under the name goes on from its last seq. Only the redis backend
	// keeps anything across tenants besides the numbering (the ledgers
	// set, the numbered hash: forgetTenant, docs/durability.md).
	Forget(ctx context.Context, keep func(tenant string) bool) (int, error)
}

// Record is one inbound delivery in a tenant's ledger.
type Record struct {
	// Seq is the record's per-tenant sequence number, set by Append.
	Seq uint64
	// Kind is the caller's record kind (the relay stores platform.Kind).
	Kind uint8
	// Platform, SessionKey and ChatID route the record.
	Platform   string
	SessionKey string
	ChatID     string
	// Payload is the record's opaque content (an encoded event). Stats and
	// Bounds count its length as the record's size.
	Payload []byte
	// Received is when the platform event reached the connector.
	Received time.Time
	// Generation is the creation, in Unix microseconds, of the tenant the
	// record was stored for (the relay's Tenant.Created, as the storing
	// instance knew it); zero for none known. The redis and memory
	// backends keep it; the embedded store, which one process alone opens,
	// reads it back as zero (its layout has no room for it), as every
	// backend does for a record stored by a version that set none.
	Generation int64
}

// Bounds limit a tenant's ledger. A zero field is no limit.
type Bounds struct {
	// MaxEntries is the most records kept.
	MaxEntries int
	// MaxBytes is the most payload bytes kept.
	MaxBytes int64
	// MaxAge drops records received longer ago than this, by the store's
	// clock.
	MaxAge time.Duration
}

// Dropped describes a record Trim removed.
type Dropped struct {
	Seq      uint64
	Kind     uint8
	Platform string
	// Bytes is the payload's length.
	Bytes    int
	Received time.Time
}

// Stats is the size of a tenant's ledger.
type Stats struct {
	Entries int
	// Bytes is the sum of the records' payload lengths.
	Bytes int64
}

// Capabilities stores opaque values until they expire: the capability
// vault's backing store. Keys are the caller's (the vault composes tenant,
// session and kind into them).
type Capabilities interface {
	// Put stores value under key until expires, replacing an older value.
	Put(ctx context.Context, key string, value []byte, expires time.Time) error
	// PutUnlessLater is Put unless the live value under key is of a later
	// generation than gen (> 0; else it is Put), atomically: a value's
	// generation is the integer field "c" of the JSON object it holds
	// (zero for none; Later). The vault keeps its tenant's creation there,
	// so an earlier creation's entry never replaces a later one's. stored
	// is false when it kept the later value.
	PutUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (stored bool, err error)
	// Get returns the value under key unless it is absent or expired by the
	// store's clock. A value that does not decode (a damaged data file,
	// or one another program wrote, of any Redis type) is answered as
	// absent, not as a failure that would last as long as it: the next
	// Put replaces it.
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	// Delete removes key; an absent key is not an error.
	Delete(ctx context.Context, key string) error
}

// Claims are expiring markers that one caller holds at a time: a platform
// claims a key (a Slack event id) before it acts on it, so that of the
// instances sharing the store one acts, and holds it for as long as a
// repeat must be refused. Expired claims are forgotten (swept), so keys
// made per event do not accumulate. On redis a claim lapses by the
// server's clock, and one another store handle (instance) took is never
// the caller's, whatever either clock says.
type Claims interface {
	// Claim takes key until expires unless a live claim holds it, and
	// reports whether this call took it (on Redis, a resend of this call
	// after a lost reply finds its own claim: taken).
	Claim(ctx context.Context, key string, expires time.Time) (bool, error)
	// Hold makes key's claim last until expires, whoever held it.
	Hold(ctx context.Context, key string, expires time.Time) error
	// Renew makes the caller's claim on key last until expires: the claim
	// it took (Claim) or renewed until held, or none when key's claim
	// lapsed or is absent. A live claim lasting past held is another
	// caller's: it stays as it is, and Renew reports false.
	Renew(ctx context.Context, key string, held, expires time.Time) (bool, error)
	// Release drops key's claim unless it lasts past expires: the claim
	// the caller took (Claim) or last held (Hold, Renew) until expires goes, one
	// another caller took since it lapsed stays (taken once it expired, by
	// any clock, that one lasts past it). An absent claim is not an error.
	Release(ctx context.Context, key string, expires time.Time) error
}

// Owners records which instance and connection own a tenant's session, so
// the session's inbound keeps going to one gateway connection. Entries
// expire after their TTL, which bounds the records kept.
type Owners interface {
	// Set makes o the owner of tenant's session for ttl (> 0).
	Set(ctx context.Context, tenant, sessionKey string, o Owner, ttl time.Duration) error
	// Get returns the session's owner unless it is absent or expired by
	// the store's clock.
	Get(ctx context.Context, tenant, sessionKey string) (Owner, bool, error)
	// Delete forgets the session's owner.
	Delete(ctx context.Context, tenant, sessionKey string) error
}

// Owner is the connection a session's inbound goes to.
type Owner struct {
	// Instance names the connector instance holding the connection.
	Instance string
	// Conn names the connection within the instance.
	Conn string
	// ChatID is the chat the session's last inbound came from.
	ChatID string
}

// Leases are named, exclusive, expiring leases (leader election, a job only
// one instance may run). Every new holder gets a fencing token larger than
// any earlier holder's, so a resource can refuse a stale holder's writes.
//
// On the memory and embedded backends a lease expires by the store's clock
// (Config.Clock). On the redis backend it expires by the Redis server's clock
// (SET PX), and Lease.Expires is an estimate: the store's clock plus the
// remaining TTL the server reported.
type Leases interface {
	// Acquire takes the lease name for holder for ttl (> 0) if it is free
	// or expired, with a new fencing token. If holder already holds it,
	// Acquire extends it and keeps the token. Otherwise acquired is false
	// and the current lease is returned.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (l Lease, acquired bool, err error)
	// Renew extends the lease l for ttl from now. It fails with ErrNotHeld
	// when l has expired or another holder took the lease.
	Renew(ctx context.Context, name string, l Lease, ttl time.Duration) (Lease, error)
	// Release gives up l. It fails with ErrNotHeld when l is not the
	// current lease; the lease then stays with whoever holds it.
	Release(ctx context.Context, name string, l Lease) error
	// Holder returns the current lease, ok false when it is free.
	Holder(ctx context.Context, name string) (l Lease, ok bool, err error)
	// Drop forgets the lease name, its fencing token included, when it is
	// free; a held lease stays (its holder drops it once it released it).
	// It is for a name never used again (a one-off name, such as a
	// generation's): a later Acquire starts its tokens over.
	Drop(ctx context.Context, name string) error
}

// Lease is one holder's tenure of a named lease.
type Lease struct {
	Holder string
	// Token is the fencing token: it grows with every new holder.
	Token   uint64
	Expires time.Time
}

// PubSub carries notifications between the connector's instances (on the
// memory and embedded backends, between the subscribers of one process).
// Delivery is at most once: a message published while a subscriber is
// disconnected, or when its buffer of SubscriptionBuffer messages is full,
// is lost. Durable truth stays in the ledger; a notification only says
// "look again".
type PubSub interface {
	// Publish sends msg to every current subscriber of channel.
	Publish(ctx context.Context, channel string, msg []byte) error
	// Subscribe returns the messages published on channel after it
	// returns. The channel is closed after cancel is called, ctx is done or
	// the store is closed. Receivers must not modify the messages.
	Subscribe(ctx context.Context, channel string) (msgs <-chan []byte, cancel func(), err error)
}

// Message is one message for PublishAll.
type Message struct {
	Channel string
	Msg     []byte
}

// BatchPublisher is a PubSub that publishes several messages at once, in
// their order (the redis backend: one pipeline, sharing one round trip).
type BatchPublisher interface {
	// PublishAll publishes msgs in order and returns how many failed, and
	// the first failure.
	PublishAll(ctx context.Context, msgs []Message) (failed int, err error)
}

// SubscriptionBuffer is how many undelivered messages a subscription holds
// before newer ones are dropped.
const SubscriptionBuffer = 256

// Registry is a small namespaced key/value store for runtime configuration
// (a tenant registry, say). Each namespace has a revision that grows with
// every change in it, so a reader can tell whether anything changed.
type Registry interface {
	// Put stores value under key and returns the namespace's new revision.
	Put(ctx context.Context, namespace, key string, value []byte) (rev uint64, err error)
	// Get returns the entry under key; a value that is no entry (as List
	// passes over) is none, which Put and CompareAndSwap take it for too.
	Get(ctx context.Context, namespace, key string) (e Entry, ok bool, err error)
	// Delete removes key, reporting whether it was there, a value that is
	// no entry too (so an admin can remove it). A removal bumps the
	// namespace's revision.
	Delete(ctx context.Context, namespace, key string) (deleted bool, err error)
	// List returns every entry of namespace sorted by key, and the
	// namespace's revision (0 for a namespace never written). It passes
	// over a value that is no entry (another program's on redis, a
	// damaged one on the embedded backend).
	List(ctx context.Context, namespace string) (entries []Entry, rev uint64, err error)
	// Revision returns the namespace's revision (0 for a namespace never
	// written) without reading its entries: a cheap look for a change.
	Revision(ctx context.Context, namespace string) (rev uint64, err error)
	// CompareAndSwap replaces the value under key with value when the
	// value stored there now is old, atomically for every instance
	// sharing the store: old nil means key must be absent, value nil
	// removes the entry. It reports whether it swapped; a swap bumps the
	// namespace's revision. Of concurrent swaps from one old value, one
	// succeeds.
	CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (swapped bool, err error)
}

// Entry is one registry value.
type Entry struct {
	Key   string
	Value []byte
	// Rev is the namespace's revision when the value was written.
	Rev uint64
}

// Errors. Test them with errors.Is.
var (
	// ErrClosed is returned by every method of a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid is returned for a bad argument (an empty or too long
	// name, a non-positive TTL or read size); the message says which.
	ErrInvalid = errors.New("store: invalid argument")
	// ErrNotHeld is returned by Renew and Release for a lease the caller
	// no longer holds.
	ErrNotHeld = errors.New("store: lease not held")
	// ErrNotReplicated is returned by the redis backend's writes that
	// Config.RedisMinReplicas replicas did not acknowledge in time: the
	// write may survive or not, so it must not be confirmed to anyone
	// (docs/durability.md says which writes, and what stays behind).
	ErrNotReplicated = errors.New("store: write not acknowledged by enough replicas")
)

// UnreadableRecord is the error, wrapped, of a Ledger.Read that met a
// stored record that does not decode (a field another program or version
// wrote into a redis stream): Read returns the records before it with this
// error, so the caller can pass over Seq and remove it (Ack) instead of
// stopping there for good. It wraps the store's corrupt-value error.
type UnreadableRecord struct {
	// Seq is the record's sequence number, or with ForeignID that of the
	// record before the entry (where to read on from).
	Seq uint64
	// ForeignID, when set, is the redis stream id of an entry the
	// connector did not write (not 0-<seq>: added by hand or another
	// program), which Read has removed already.
	ForeignID string
}

func (e *UnreadableRecord) Error() string {
	if e.ForeignID != "" {
		return fmt.Sprintf("stream entry %s: %v", e.ForeignID, errCorrupt)
	}
	return fmt.Sprintf("record %d: %v", e.Seq, errCorrupt)
}

func (e *UnreadableRecord) Unwrap() error { return errCorrupt }

// claimPrefix puts the memory and embedded backends' claims beside their
// capabilities, where no vault key can start (those start "vault/").
const claimPrefix = "claim\x00"

// MaxNameBytes bounds tenant ids, session keys, capability keys, lease
// names, channels, namespaces and registry keys.
const MaxNameBytes = 1024

// Backends.
const (
	BackendMemory   = "memory"
	BackendEmbedded = "embedded"
	BackendRedis    = "redis"
)

// Config selects and configures a backend. The zero value opens the
// embedded backend in DefaultPath. Its fields are the configuration keys
// of the store section (cmd/connector); docs/durability.md says what each
// Redis mode promises.
type Config struct {
	// Backend is "embedded", "redis" or "memory". Empty means embedded.
	Backend string
	// Path is the embedded backend's data directory, created if missing.
	// Empty means DefaultPath().
	Path string
	// The redis backend reaches exactly one of: RedisURL, one server, e.g.
	// redis://user:password@host:6379/0 (rediss:// for TLS);
	// RedisSentinel, a primary found through Sentinel, whose failovers
	// the store follows; RedisCluster, a Redis Cluster.
	RedisURL      string
	RedisSentinel *RedisSentinel
	RedisCluster  *RedisCluster
	// RedisTLS is the TLS configuration of whichever mode turns TLS on (a
	// rediss:// URL, RedisSentinel.TLS, RedisCluster.TLS), e.g. with the
	// CA that signed the servers' certificates. Nil: the system's roots.
	RedisTLS *tls.Config
	// RedisMinReplicas, when above 0, makes the writes a confirmation or a
	// lease waits for return only once that many replicas acknowledged
	// them (WAIT after each pipeline that carries one), else fail with
	// ErrNotReplicated (docs/configuration.md, store.redis_min_replicas).
	// 0: a write returns when the primary has it.
	RedisMinReplicas int
	// RedisReplicaTimeout bounds that wait; a lease's wait is bounded by a
	// quarter of its TTL (its renewal period, Tenure) when that is
	// shorter. 0 means DefaultRedisReplicaTimeout.
	RedisReplicaTimeout time.Duration
	// RedisPrefix starts every key the redis backend writes, so several
	// deployments (or tests) can share one server. Empty means
	// "connector:". It may not contain { or } (the keys' hash tags).
	RedisPrefix string
	// Clock is the clock of expiry, record ages, (memory, embedded) leases
	// and sweeps. Nil means clock.System.
	Clock clock.Clock
}

// RedisSentinel names a primary that Sentinels watch. It is also the
// store.redis_sentinel section of the connector's config file.
type RedisSentinel struct {
	// Master is the name the Sentinels know the primary by.
	Master string `yaml:"master"`
	// Addrs are Sentinels' host:port addresses; one that answers is
	// enough, and the others it knows of are learnt from it.
	Addrs []string `yaml:"addrs"`
	// Username is the ACL user for the primary and its replicas. Default
	// the default user.
	Username string `yaml:"username"`
	// Password is the password for the primary and its replicas.
	Password string `yaml:"password"`
	// SentinelUsername is the ACL user for the Sentinels themselves, when
	// they require one.
	SentinelUsername string `yaml:"sentinel_username"`
	// SentinelPassword is the Sentinels' own password, when they require
	// one (their requirepass), which may differ from password.
	SentinelPassword string `yaml:"sentinel_password"`
	// TLS connects to the Sentinels, the primary and the replicas over
	// TLS.
	TLS bool `yaml:"tls"`
}

// RedisCluster names a Redis Cluster.
type RedisCluster struct {
	// Addrs are nodes' host:port addresses; the others are learnt from
	// them.
	Addrs []string
	// Username and Password authenticate to every node (Username empty:
	// the default user).
	Username, Password string
	// TLS connects to the nodes over TLS.
	TLS bool
}

// DefaultRedisReplicaTimeout is how long a write waits for
// Config.RedisMinReplicas replicas by default.
const DefaultRedisReplicaTimeout = time.Second

// Open opens the backend cfg selects.
func Open(ctx context.Context, cfg Config) (Store, error) {
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	switch cfg.Backend {
	case BackendMemory:
		return NewMemory(cfg.Clock), nil
	case BackendEmbedded, "":
		if cfg.Path == "" {
			p, err := DefaultPath()
			if err != nil {
				return nil, err
			}
			cfg.Path = p
		}
		return openEmbedded(ctx, cfg.Path, cfg.Clock)
	case BackendRedis:
		cfg.RedisPrefix = cmp.Or(cfg.RedisPrefix, "connector:")
		cfg.RedisReplicaTimeout = cmp.Or(cfg.RedisReplicaTimeout, DefaultRedisReplicaTimeout)
		return openRedis(ctx, cfg)
	}
	return nil, fmt.Errorf("%w: unknown store backend %q (want embedded, redis or memory)", ErrInvalid, cfg.Backend)
}

// DefaultPath is the embedded backend's default data directory:
// $XDG_STATE_HOME/connector, else ~/.local/state/connector.
func DefaultPath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "connector"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("store: no default data directory (set store.path): %w", err)
	}
	return filepath.Join(home, ".local", "state", "connector"), nil
}

// checkName rejects an empty or oversized name; what says which argument.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxNameBytes)
	}
	return nil
}

// checkTTL rejects a non-positive TTL.
func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: TTL %v is not positive", ErrInvalid, ttl)
	}
	return nil
}

// checkAckAllArgs rejects a bad tenant name in acks.
func checkAckAllArgs(acks map[string][]uint64) error {
	for tenant := range acks {
		if err := checkName("tenant", tenant); err != nil {
			return err
		}
	}
	return nil
}

// checkReadArgs rejects a bad tenant name or a non-positive read size.
func checkReadArgs(tenant string, max int) error {
	if err := checkName("tenant", tenant); err != nil || max > 0 {
		return err
	}
	return fmt.Errorf("%w: read size %d is not positive", ErrInvalid, max)
}

// readDone reports whether a Read that holds n records of size payload
// bytes has what it was asked for (Ledger.Read).
func readDone(n, max int, size, maxBytes int64) bool {
	return n >= max || (maxBytes > 0 && size >= maxBytes)
}

// checkOwnerArgs rejects a bad tenant or session key name.
func checkOwnerArgs(tenant, sessionKey string) error {
	return cmp.Or(checkName("tenant", tenant), checkName("session key", sessionKey))
}

// checkLeaseArgs rejects bad Leases.Acquire or Renew arguments.
func checkLeaseArgs(name, holder string, ttl time.Duration) error {
	return cmp.Or(checkName("lease name", name), checkName("lease holder", holder), checkTTL(ttl))
}

// checkRegistryArgs rejects a bad namespace or registry key name.
func checkRegistryArgs(namespace, key string) error {
	return cmp.Or(checkName("namespace", namespace), checkName("registry key", key))
}

// committed is the commit of a Stage whose records were durable before it
// returned.
func committed() error { return nil }

// staged is the Stage of a backend whose Append returned seqs, err: the
// records are durable before it returns.
func staged(seqs []uint64, err error) ([]uint64, func() error, error) {
	if err != nil {
		return nil, nil, err
	}
	return seqs, committed, nil
}

// expired reports whether a value that expires at expires is gone at now:
// it is from its expiry instant on.
func expired(now, expires time.Time) bool { return !now.Before(expires) }

// newEpoch returns a fresh random epoch id.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// receivedAt is the receive time Append stores for a record stamped
// received: now when it is zero, at the microsecond, the precision records
// keep.
func receivedAt(received, now time.Time) time.Time {
	if received.IsZero() {
		received = now
	}
	return time.UnixMicro(received.UnixMicro())
}

// trimRule is Bounds resolved against one moment: the single statement of
// which record Trim drops next, shared by the memory and embedded backends
// and mirrored by the redis backend's trim script.
type trimRule struct {
	maxEntries int
	maxBytes   int64
	cutoff     int64 // drop records received before this, in Unix µs; 0: none
}

func (b Bounds) at(now time.Time) trimRule {
	r := trimRule{maxEntries: b.MaxEntries, maxBytes: b.MaxBytes}
	if b.MaxAge > 0 {
		r.cutoff = now.Add(-b.MaxAge).UnixMicro()
	}
	return r
}

// drop reports whether the oldest record, received at receivedMicros, goes
// from a log of entries records and bytes payload bytes.
func (r trimRule) drop(entries int, bytes int64, receivedMicros int64) bool {
	return (r.maxEntries > 0 && entries > r.maxEntries) ||
		(r.maxBytes > 0 && bytes > r.maxBytes) ||
		(r.cutoff != 0 && receivedMicros < r.cutoff)
}

// expiringStore is where every backend keeps capabilities and owners:
// expiring values (encodeExpiring on the embedded and redis backends),
// judged by the store's clock. A value is named by owner (an owner's, else a capability's) and
// a, b: the capability key and "", or the owner's tenant and session key.
type expiringStore interface {
	putExpiring(ctx context.Context, owner bool, a, b string, value []byte, expires time.Time) error
	// putCapUnlessLater is Capabilities.PutUnlessLater, gen > 0.
	putCapUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (bool, error)
	// getLive returns the value unless there is none or it has expired.
	getLive(ctx context.Context, owner bool, a, b string) ([]byte, bool, error)
	delExpiring(ctx context.Context, owner bool, a, b string) error
}

// expiringCaps is Capabilities on an expiringStore.
type expiringCaps struct{ s expiringStore }

func (c expiringCaps) Put(ctx context.Context, key string, value []byte, expires time.Time) error {
	if err := checkName("capability key", key); err != nil {
		return err
	}
	return opErr("put capability", c.s.putExpiring(ctx, false, key, "", value, expires))
}

func (c expiringCaps) PutUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (bool, error) {
	if gen <= 0 {
		return true, c.Put(ctx, key, value, expires)
	}
	if err := checkName("capability key", key); err != nil {
		return false, err
	}
	stored, err := c.s.putCapUnlessLater(ctx, key, value, gen, expires)
	return stored, opErr("put capability", err)
}

// Later reports whether a live capability value is of a later
// generation than gen (Capabilities.PutUnlessLater): the single statement
// of the rule, which the redis backend's putLaterScript mirrors. A value
// that is not a JSON object, or has no member "c" (or a null one), has
// none. A c no version writes (not an integer: a float, a string) is
// taken for later: an earlier creation's entry never replaces what may be
// a later one's. c is compared as a double, as Lua does.
func Later(value []byte, gen int64) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(value, &v) != nil || v["c"] == nil || string(v["c"]) == "null" {
		return false
	}
	c, err := strconv.ParseFloat(string(v["c"]), 64) // out of range: ±Inf
	return (err != nil && !errors.Is(err, strconv.ErrRange)) || c != math.Trunc(c) || c > float64(gen)
}

func (c expiringCaps) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := checkName("capability key", key); err != nil {
		return nil, false, err
	}
	value, ok, err := c.s.getLive(ctx, false, key, "")
	if errors.Is(err, errCorrupt) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, opErr("get capability", err)
	}
	return value, ok, nil
}

func (c expiringCaps) Delete(ctx context.Context, key string) error {
	if err := checkName("capability key", key); err != nil {
		return err
	}
	return opErr("delete capability", c.s.delExpiring(ctx, false, key, ""))
}

// expiringOwners is Owners on an expiringStore.
type expiringOwners struct {
	s     expiringStore
	clock clock.Clock
}

func (w expiringOwners) Set(ctx context.Context, tenant, sessionKey string, o Owner, ttl time.Duration) error {
	if err := cmp.Or(checkOwnerArgs(tenant, sessionKey), checkTTL(ttl)); err != nil {
		return err
	}
	return opErr("set owner", w.s.putExpiring(ctx, true, tenant, sessionKey, encodeOwner(o), w.clock.Now().Add(ttl)))
}

func (w expiringOwners) Get(ctx context.Context, tenant, sessionKey string) (Owner, bool, error) {
	if err := checkOwnerArgs(tenant, sessionKey); err != nil {
		return Owner{}, false, err
	}
	val, ok, err := w.s.getLive(ctx, true, tenant, sessionKey)
	var o Owner
	if ok {
		o, err = decodeOwner(val)
	}
	if err != nil {
		return Owner{}, false, opErr("get owner", err)
	}
	return o, ok, nil
}

func (w expiringOwners) Delete(ctx context.Context, tenant, sessionKey string) error {
	if err := checkOwnerArgs(tenant, sessionKey); err != nil {
		return err
	}
	return opErr("delete owner", w.s.delExpiring(ctx, true, tenant, sessionKey))
}

// opErr names the operation that failed with err; nil stays nil.
func opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// claims is Claims on a backend's claim, hold and release of the stored
// key prefix + the caller's key, the single statement of the argument
// checks: claim takes the key until expires unless a live claim lasting
// past held holds it, atomically, and reports whether it took it; hold
// sets its expiry; release deletes it unless it lasts past expires,
// atomically. The memory and embedded backends keep claims beside their
// capabilities, under claimPrefix, so the sweep forgets them.
type claims struct {
	prefix  string
	claim   func(ctx context.Context, key string, held, expires time.Time) (bool, error)
	hold    func(ctx context.Context, key string, expires time.Time) error
	release func(ctx context.Context, key string, expires time.Time) error
}

// holdExpiring is the hold of a backend that keeps claims as expiring
// values (memory, embedded).
func holdExpiring(s expiringStore) func(context.Context, string, time.Time) error {
	return func(ctx context.Context, key string, expires time.Time) error {
		return s.putExpiring(ctx, false, key, "", nil, expires)
	}
}

func (c claims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	return c.Renew(ctx, key, time.Time{}, expires)
}

func (c claims) Renew(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	if err := checkName("claim key", key); err != nil {
		return false, err
	}
	took, err := c.claim(ctx, c.prefix+key, held, expires)
	return took, opErr("claim", err)
}

func (c claims) Hold(ctx context.Context, key string, expires time.Time) error {
	if err := checkName("claim key", key); err != nil {
		return err
	}
	return opErr("hold claim", c.hold(ctx, c.prefix+key, expires))
}

func (c claims) Release(ctx context.Context, key string, expires time.Time) error {
	if err := checkName("claim key", key); err != nil {
		return err
	}
	return opErr("release claim", c.release(ctx, c.prefix+key, expires))
}

// localLeases is Leases on the backends that keep leases themselves
// (memory, embedded), by the store's clock: the single statement of the
// lease rules. lease runs fn on the stored lease name (zero when none) in
// one transaction, a writing one when write is set, and stores what fn
// returns when fn says so (a zero Lease: removes the record).
type localLeases struct {
	clock clock.Clock
	lease func(ctx context.Context, name string, write bool, fn func(cur Lease) (next Lease, put bool, err error)) error
}

func (ls localLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error) {
	if err := checkLeaseArgs(name, holder, ttl); err != nil {
		return Lease{}, false, err
	}
	var l Lease
	var acquired bool
	err := ls.lease(ctx, name, true, func(cur Lease) (Lease, bool, error) {
		now := ls.clock.Now()
		switch {
		case !cur.liveAt(now):
			l, acquired = Lease{Holder: holder, Token: cur.Token + 1, Expires: now.Add(ttl)}, true
		case cur.Holder == holder:
			l, acquired = Lease{Holder: holder, Token: cur.Token, Expires: now.Add(ttl)}, true
		default:
			l, acquired = cur, false
		}
		return l, acquired, nil
	})
	if err != nil {
		return Lease{}, false, err
	}
	return l, acquired, nil
}

func (ls localLeases) Renew(ctx context.Context, name string, l Lease, ttl time.Duration) (Lease, error) {
	if err := checkLeaseArgs(name, l.Holder, ttl); err != nil {
		return Lease{}, err
	}
	err := ls.lease(ctx, name, true, func(cur Lease) (Lease, bool, error) {
		now := ls.clock.Now()
		if !holds(cur, l, now) {
			return Lease{}, false, ErrNotHeld
		}
		l.Expires = now.Add(ttl)
		return l, true, nil
	})
	if err != nil {
		return Lease{}, err
	}
	return l, nil
}

func (ls localLeases) Release(ctx context.Context, name string, l Lease) error {
	if err := checkName("lease name", name); err != nil {
		return err
	}
	return ls.lease(ctx, name, true, func(cur Lease) (Lease, bool, error) {
		if !holds(cur, l, ls.clock.Now()) {
			return Lease{}, false, ErrNotHeld
		}
		return Lease{Token: l.Token}, true, nil // the token outlives the tenure
	})
}

func (ls localLeases) Drop(ctx context.Context, name string) error {
	if err := checkName("lease name", name); err != nil {
		return err
	}
	return ls.lease(ctx, name, true, func(cur Lease) (Lease, bool, error) {
		if cur.liveAt(ls.clock.Now()) {
			return cur, false, nil
		}
		return Lease{}, true, nil // a zero lease is no record
	})
}

func (ls localLeases) Holder(ctx context.Context, name string) (Lease, bool, error) {
	if err := checkName("lease name", name); err != nil {
		return Lease{}, false, err
	}
	var l Lease
	err := ls.lease(ctx, name, false, func(cur Lease) (Lease, bool, error) {
		l = cur
		return cur, false, nil
	})
	if err != nil || !l.liveAt(ls.clock.Now()) {
		return Lease{}, false, err
	}
	return l, true, nil
}

// regWrite is one registry change, and the single statement of when Put,
// Delete and CompareAndSwap make one: Put always, Delete when key is
// present (a value that is no entry too, which the others take for none),
// CompareAndSwap when the stored value is old (nil: absent). A
// change bumps the namespace's revision and then stores value under key,
// or removes key when del is set. The redis backend's registryWriteScript
// mirrors it.
type regWrite struct {
	op    string // the method, for errors
	key   string
	value []byte
	del   bool
	when  regWhen
	old   []byte
}

// regWhen says when a regWrite applies.
type regWhen uint8

const (
	regAlways  regWhen = iota // Put
	regPresent                // Delete
	regFrom                   // CompareAndSwap: from old
)

// applies reports whether w changes the entry holding cur (present: there
// is one).
func (w regWrite) applies(cur []byte, present bool) bool {
	switch w.when {
	case regPresent:
		return present
	case regFrom:
		return present == (w.old != nil) && (!present || bytes.Equal(cur, w.old))
	}
	return true
}

// registry is Registry on a backend, the single statement of its argument
// checks: write applies w atomically and reports the new revision and
// whether w applied; get, list (in any order) and revision read.
type registry struct {
	write    func(ctx context.Context, namespace string, w regWrite) (rev uint64, applied bool, err error)
	get      func(ctx context.Context, namespace, key string) (Entry, bool, error)
	list     func(ctx context.Context, namespace string) ([]Entry, uint64, error)
	revision func(ctx context.Context, namespace string) (uint64, error)
}

func (r registry) Put(ctx context.Context, namespace, key string, value []byte) (uint64, error) {
	if err := checkRegistryArgs(namespace, key); err != nil {
		return 0, err
	}
	rev, _, err := r.write(ctx, namespace, regWrite{op: "put", key: key, value: value})
	return rev, err
}

func (r registry) Delete(ctx context.Context, namespace, key string) (bool, error) {
	if err := checkRegistryArgs(namespace, key); err != nil {
		return false, err
	}
	_, deleted, err := r.write(ctx, namespace, regWrite{op: "delete", key: key, del: true, when: regPresent})
	return deleted, err
}

func (r registry) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	if err := checkRegistryArgs(namespace, key); err != nil {
		return false, err
	}
	_, swapped, err := r.write(ctx, namespace, regWrite{op: "compare-and-swap", key: key, value: value, del: value == nil, when: regFrom, old: old})
	return swapped, err
}

func (r registry) Get(ctx context.Context, namespace, key string) (Entry, bool, error) {
	if err := checkRegistryArgs(namespace, key); err != nil {
		return Entry{}, false, err
	}
	return r.get(ctx, namespace, key)
}

func (r registry) List(ctx context.Context, namespace string) ([]Entry, uint64, error) {
	if err := checkName("namespace", namespace); err != nil {
		return nil, 0, err
	}
	es, rev, err := r.list(ctx, namespace)
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return es, rev, err
}

func (r registry) Revision(ctx context.Context, namespace string) (uint64, error) {
	if err := checkName("namespace", namespace); err != nil {
		return 0, err
	}
	return r.revision(ctx, namespace)
}

// holds reports whether l is the live lease cur.
func holds(cur, l Lease, now time.Time) bool {
	return cur.liveAt(now) && cur.Holder == l.Holder && cur.Token == l.Token
}

// liveAt reports whether the stored lease l has a holder at now.
func (l Lease) liveAt(now time.Time) bool {
	return l.Holder != "" && !expired(now, l.Expires)
}
