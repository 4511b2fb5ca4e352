package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
)

// The redis backend's keys, each after the configured prefix. A kind's name
// never begins another's, and the variable part comes last, so no two
// (kind, name) pairs share a key.
//
//	epoch                  the epoch (SET NX once)
//	layout                 the key layout, redisLayout (SET NX once)
//	seq:{<tenant>}         the tenant's last assigned seq (INCRBY)
//	replid:{<tenant>}      the replication id of the primary that last
//	                       assigned one (appendScript)
//	log:{<tenant>}         the tenant's ledger: a stream with ids 0-<seq>,
//	                       fields k kind, p platform, s session key,
//	                       c chat id, r received (Unix µs), d payload
//	bytes:{<tenant>}       the sum of the stream's payload lengths (addBytes)
//	answers:{<tenant>}     hash: an append's, ack's or trim's id -> its
//	                       answer, for its resends, and the empty
//	                       field -> 65 dashes (answerLua), PX
//	oldanswers:{<tenant>}  the answers before those, PX
//	pruned:{<tenant>}      1, set by Forget; an append sets it to 2
//	                       (appendScript) and indexes the tenant again,
//	                       then deletes it (untake)
//	ledgers                set of the tenants that appended since Forget
//	                       last dropped them (SADD)
//	numbered{<prefix>ledgers}  hash: tenant -> the highest seq a store
//	                       recorded it gave (indexScript), so a tenant
//	                       whose keys are lost does not number from 1
//	                       again; on the ledgers set's slot
//	cap:<key>              expiring capability value, PX as garbage collection
//	owner:<n>:{<tenant>}<session key>  expiring owner (n = len(tenant)), PX
//	lease:{<name>}         "<token>:<holder>", PX the lease's TTL
//	leasetoken:{<name>}    the last fencing token (INCR)
//	leaseanswer:{<name>}:<release>  a release's answer for its resends, PX
//	claim:<key>            "<Unix s> <instance id><tag><ns>" (claimValue), PX the claim's TTL
//	                       (tag: random, per write)
//	registry:{<namespace>} hash key -> entry
//	registryrev:{<namespace>} the namespace's revision (INCR; registryRevLua)
//	registryanswer:{<namespace>}:<write>  a registry write's answer (its
//	                       revision, 0: not applied) for its resends, PX
//	channel:<channel>      a pub/sub channel
//
// Every multi-key change is one Lua script, atomic on the server, so seqs
// stay monotonic across instances. A script's keys share their braces, the
// hash tag (tagged), so on a Redis Cluster they live in one slot and the
// tenants spread over the shards. The keys every tenant shares, ledgers and
// numbered, are written apart from the tenant's scripts (indexScript,
// forgetTenant, Tenants); docs/durability.md says when.

// redisExpirySlack is added to the PX of capabilities and owners, whose
// expiry is judged by the reading store's clock against the writer's: the
// key outlives its expiry by this much, so a reader whose clock is behind
// the writer's by at most this still sees the value until it expires by
// its own reckoning, and no read of the store sees it longer
// (docs/durability.md).
const redisExpirySlack = time.Minute

// minRedisVersion has exclusive XRANGE ranges.
const minRedisVersion = "6.2"

type redisStore struct {
	c redis.UniversalClient
	// cluster is c on a Redis Cluster, else nil.
	cluster *redis.ClusterClient
	// where names the server or servers in errors, without credentials.
	where string
	p     string // key prefix
	clock clock.Clock
	// id tells this store's claims from other instances' (claimValue): 18
	// random digits.
	id    string
	epoch string
	// minReplicas and replicaTimeout are Config.RedisMinReplicas and
	// Config.RedisReplicaTimeout.
	minReplicas    int
	replicaTimeout time.Duration
	// resend is how long go-redis may send a command again after its
	// first send (resendWindow): a registry write's, a lease release's or
	// a ledger call's answer is kept that long for its resends
	// (registryWriteScript, heldScript, answerLua), and ResendWindow
	// gives it.
	resend time.Duration
	// pipe sends the ledger's appends, acks and reads, the capabilities'
	// writes and the pub/sub publishes, every command queued while the
	// previous round trip was under way in one pipeline per server
	// (redispipe.go).
	pipe *batcher[pipeCall]
	// indexed holds the tenants this store has added to the ledgers set.
	indexed sync.Map
	// highest holds, per tenant, the highest seq this store gave or read
	// (*atomic.Uint64; seen, saw).
	highest sync.Map
	// relook holds the tenants whose look after Forget's removal failed
	// (forgetTenant), which the next Forget looks at again.
	relook sync.Map

	// subs holds every subscription of the store on one connection
	// (redispubsub.go).
	subs *redisSubs

	closeOnce sync.Once
}

func openRedis(ctx context.Context, cfg Config) (*redisStore, error) {
	c, cluster, where, err := redisClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &redisStore{
		c: c, cluster: cluster, where: where, p: cfg.RedisPrefix, clock: cfg.Clock,
		minReplicas: cfg.RedisMinReplicas, replicaTimeout: cfg.RedisReplicaTimeout,
		resend: resendWindow(c, readTimeoutFor(cfg), cfg.RedisSentinel != nil && cfg.RedisSentinel.TLS),
		subs:   newRedisSubs(c), id: strconv.FormatInt(1e17+mathrand.Int64N(9e17), 10),
	}
	if err := s.init(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	s.pipe = newBatcher(maxPipeline, s.sendPipeline)
	return s, nil
}

// versionAtLeast compares dotted versions numerically.
func versionAtLeast(v, min string) bool {
	have, want := strings.Split(v, "."), strings.Split(min, ".")
	for i, w := range want {
		if i >= len(have) {
			return false
		}
		h, err := strconv.Atoi(have[i])
		if err != nil {
			return false
		}
		n, _ := strconv.Atoi(w)
		if h != n {
			return h > n
		}
	}
	return true
}

// rerr reports a closed client as ErrClosed.
func rerr(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	return err
}

func (s *redisStore) Epoch() string              { return s.epoch }
func (s *redisStore) Ledger() Ledger             { return redisLedger{s} }
func (s *redisStore) Capabilities() Capabilities { return expiringCaps{s} }
func (s *redisStore) Owners() Owners             { return expiringOwners{s, s.clock} }
func (s *redisStore) Leases() Leases             { return redisLeases{s} }
func (s *redisStore) PubSub() PubSub             { return redisPubSub{s} }
func (s *redisStore) Registry() Registry {
	return registry{s.writeRegistry, s.getRegistry, s.listRegistry, s.registryRevision}
}
func (s *redisStore) Claims() Claims {
	return claims{s.p + "claim:", s.claim, s.holdClaim, s.releaseClaim}
}

func (s *redisStore) Close() (err error) {
	s.closeOnce.Do(func() {
		// The client first: a round trip under way (a server that does not
		// answer) fails at once instead of holding Close up for go-redis's
		// resends, and what is still queued fails with ErrClosed.
		err = s.c.Close()
		s.subs.close()
		s.pipe.close()
	})
	return err
}

// ResendWindow is how long after a message's first PUBLISH st may publish
// it again (go-redis sends a command again when its reply was lost:
// resendWindow), so how long a subscriber that takes each message once
// must remember it; zero for a store that never publishes one twice.
func ResendWindow(st Store) time.Duration {
	if s, ok := st.(*redisStore); ok {
		return s.resend
	}
	return 0
}

// pxMillis converts d to a PX argument: whole milliseconds, at least 1.
func pxMillis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

type redisLedger struct{ s *redisStore }

// appendScript assigns ARGV[3] consecutive seqs to the records that follow
// (seven arguments each; the generation, field g, is one older versions pass
// over) and adds them to the stream with ids 0-<seq>. ARGV[1] and ARGV[2]
// are the append's answer (answerLua), ARGV[4] the highest seq the store
// gave or read for the tenant (seen). A seq is never given out twice, not
// even across a failover or a lost counter (docs/durability.md): under a
// replication id (KEYS[4]) other than the one of the primary that last
// numbered the tenant, below ARGV[4], or holding no number (none while the
// stream holds entries), the counter first moves to the next multiple of
// 2^32 above itself, ARGV[4] or the stream's last entry respectively
// (past). A log key of another type (another program's) goes, with
// the byte counter. An append that finds the tenant's prune marker (Forget)
// sets it to 2, whatever it held, and answers -first: the tenant is to be
// indexed again, and the marker goes once it is (untake).
var appendScript = redis.NewScript(appendLua)

// pastLua defines past(n), the next multiple of 2^32 above n: where a
// counter that lost track of its numbers (a seq, a fencing token, a
// registry revision) moves, past every one it may have given.
const pastLua = `
local function past(n) return (math.floor(n / 4294967296) + 1) * 4294967296 end
`

const appendLua = answerLua + pastLua + `
local n, floor = tonumber(ARGV[3]), tonumber(ARGV[4])
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'stream' and kind ~= 'none' then redis.call('DEL', KEYS[2], KEYS[3]) end
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
if replid and redis.pcall('GET', KEYS[4]) ~= replid then
  local last = tonumber(redis.pcall('GET', KEYS[1]))
  if last then
    redis.call('SET', KEYS[1], past(last))
  end
  redis.call('SET', KEYS[4], replid)
end
local last = redis.pcall('INCRBY', KEYS[1], n)
if type(last) == 'table' or last == n then
  local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  local seq = tonumber(top and string.match(top[1], '^0%-(%d+)$') or '')
  if seq or type(last) == 'table' then
    last = past(seq or 0) + n
    redis.call('SET', KEYS[1], last)
  end
end
if last - n < floor then
  last = past(floor) + n
  redis.call('SET', KEYS[1], last)
end
local first = last - n + 1
local size = 0
for i = 0, n - 1 do
  local a = 5 + i * 7
  redis.call('XADD', KEYS[2], string.format('0-%d', first + i),
    'k', ARGV[a], 'p', ARGV[a + 1], 's', ARGV[a + 2], 'c', ARGV[a + 3], 'r', ARGV[a + 4], 'd', ARGV[a + 5], 'g', ARGV[a + 6])
  size = size + string.len(ARGV[a + 5])
end
addBytes(KEYS[2], KEYS[3], size)
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('SET', KEYS[5], '2')
  first = -first
end
return answer(first)
`

// answerLua begins the scripts of Append, Ack and Trim, whose last two
// KEYS are the tenant's answers and those before them, ARGV[1] the call's
// id (fresh for each) and ARGV[2] the answers' PX. go-redis sends a
// pipeline again when it lost the reply even when the server ran it: a
// resent append would store its records twice, a resent ack or trim report
// none removed. So a script returns answer(v), which keeps v (a trim's
// table as JSON) under its id for a resend to find. The answers of a
// tenant share a hash, which becomes the older one after ARGV[2] ms or at
// 1,023 answers (docs/durability.md). Its first, empty field's value is
// longer than hash-max-listpack-value (64), which makes it a hashtable at
// once: as a listpack each call's HGET and HSET would scan all its answers.
// A key of another type there goes. addBytes keeps the tenant's bytes
// counter.
const answerLua = `
local answers, older = KEYS[#KEYS - 1], KEYS[#KEYS]
local function asked(h)
  local ok, v = pcall(redis.call, 'HGET', h, ARGV[1])
  if not ok then redis.call('DEL', h) end
  return ok and v
end
local answered = asked(answers) or asked(older)
if answered then return tonumber(answered) or cjson.decode(answered) end
local function answer(v)
  local left = redis.call('PTTL', answers)
  if left >= 0 and (left < tonumber(ARGV[2]) or redis.call('HLEN', answers) >= 1024) then
    redis.call('RENAME', answers, older)
    left = -2
  end
  if left < 0 then
    redis.call('HSET', answers, '', string.rep('-', 65))
    redis.call('PEXPIRE', answers, 2 * tonumber(ARGV[2]))
  end
  redis.call('HSET', answers, ARGV[1], type(v) == 'table' and cjson.encode(v) or v)
  return v
end
-- addBytes adds delta to the bytes counter of stream, whose change it
-- follows, or sets a counter INCRBY does not take (another program wrote
-- it) to the sum of the stream's payloads instead of failing the call.
local function addBytes(stream, counter, delta)
  if type(redis.pcall('INCRBY', counter, delta)) ~= 'table' then return end
  local sum, start = 0, '-'
  while true do
    local es = redis.call('XRANGE', stream, start, '+', 'COUNT', 128)
    if #es == 0 then break end
    for _, e in ipairs(es) do
      for j = 1, #e[2], 2 do
        if e[2][j] == 'd' then sum = sum + string.len(e[2][j + 1]) end
      end
    end
    start = '(' .. es[#es][1]
  end
  redis.call('SET', counter, string.format('%d', sum))
end
`

// tagged is name in braces, the hash tag of its keys: Redis Cluster hashes
// a key by what its first { and the next } enclose, so the keys of one name
// share a slot. A } or \ in name is escaped (\) and \\), which keeps the
// tag whole (never empty, never cut short) and the keys of distinct names
// distinct.
func tagged(name string) string {
	if strings.ContainsAny(name, `}\`) {
		name = tagEscaper.Replace(name)
	}
	return "{" + name + "}"
}

var tagEscaper = strings.NewReplacer(`\`, `\\`, `}`, `\)`)

// keys are tenant's seq counter, stream and bytes counter.
func (l redisLedger) keys(tenant string) []string {
	p, t := l.s.p, tagged(tenant)
	return []string{p + "seq:" + t, p + "log:" + t, p + "bytes:" + t}
}

// answerKeys are tenant's answers hashes (answerLua).
func (l redisLedger) answerKeys(tenant string) []string {
	p, t := l.s.p, tagged(tenant)
	return []string{p + "answers:" + t, p + "oldanswers:" + t}
}

// indexKey is the set of the tenants that appended since Forget last
// dropped them.
func (l redisLedger) indexKey() string { return l.s.p + "ledgers" }

// indexKeys are the ledgers set and the numbered hash, on its slot.
func (l redisLedger) indexKeys() []string {
	key := l.indexKey()
	return []string{key, l.s.p + "numbered{" + key + "}"}
}

// prunedKey is tenant's prune marker.
func (l redisLedger) prunedKey(tenant string) string { return l.s.p + "pruned:" + tagged(tenant) }

// indexScript: KEYS the ledgers set and the numbered hash (on its slot);
// ARGV a tenant and a seq it was given (0: none). Adds the tenant to the
// set, raises its numbered entry to the seq and returns the entry as it
// was (0: none).
var indexScript = redis.NewScript(`
redis.call('SADD', KEYS[1], ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') or 0
if cur < tonumber(ARGV[2]) then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return cur
`)

// index adds tenant to the set of the tenants that ever appended and
// raises its numbered entry to last, and returns the entry as it was. It
// counts once the replicas have it, as an append does.
func (l redisLedger) index(ctx context.Context, tenant string, last uint64) (numbered uint64, err error) {
	call := scriptCall(indexScript, l.indexKeys(), tenant, last)
	call.replicate = true
	reply := l.s.pipelined(ctx, call)
	n, err := redisInt(reply.cmd)
	return uint64(max(n, 0)), cmp.Or(err, reply.unreplicated)
}

func (l redisLedger) Append(ctx context.Context, tenant string, recs []Record) ([]uint64, error) {
	if err := checkName("tenant", tenant); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, ctx.Err()
	}
	floor, numbered := l.s.seen(tenant).Load(), uint64(0)
	_, indexed := l.s.indexed.Load(tenant)
	if !indexed {
		// A tenant numbered before, whose counter is gone now, lost it with
		// its keys: its numbering must not start over.
		var err error
		if numbered, err = l.index(ctx, tenant, 0); err != nil {
			return nil, fmt.Errorf("store: append to tenant %q: %w", tenant, rerr(err))
		}
		floor = max(floor, numbered)
	}
	now := l.s.clock.Now()
	args := make([]any, 0, 4+7*len(recs))
	args = append(args, rand.Text(), pxMillis(l.s.resend), len(recs), floor)
	for i := range recs {
		r := &recs[i]
		received := receivedAt(r.Received, now)
		args = append(args, r.Kind, r.Platform, r.SessionKey, r.ChatID, received.UnixMicro(), r.Payload, r.Generation)
	}
	add := scriptCall(appendScript, slices.Concat(l.keys(tenant), []string{l.s.p + "replid:" + tagged(tenant), l.prunedKey(tenant)}, l.answerKeys(tenant)), args...)
	add.replicate = true
	stored := l.s.pipelined(ctx, add)
	first, err := redisInt(stored.cmd)
	if err != nil {
		if stored.late != nil {
			go l.forget(tenant, len(recs), stored.late)
		}
		return nil, fmt.Errorf("store: append to tenant %q: %w", tenant, rerr(err))
	}
	seqs := appendedSeqs(first, len(recs))
	last := seqs[len(seqs)-1]
	l.s.saw(tenant, last)
	failed := stored.unreplicated
	if first < 0 || !indexed && (numbered == 0 || numbered>>32 != last>>32) || (seqs[0]-1)%(1<<32) == 0 {
		// The append took the prune marker (Forget dropped the tenant from
		// the set), or this store's first append of the tenant, whose
		// numbered entry is none or in an earlier block of 2^32 (all a
		// floor needs), or its numbering started over or skipped
		// (appendScript): its keys may be gone (a failover before its first
		// append reached a replica, a server restarted without its data),
		// and from the set with them.
		if _, err := l.index(ctx, tenant, last); err != nil {
			// Raised again by the next append, which would not otherwise:
			// the numbered entry must follow a skip.
			l.s.indexed.Delete(tenant)
			failed = cmp.Or(failed, err)
		} else if first < 0 {
			l.untake(ctx, tenant)
		}
	}
	if failed == nil && !indexed {
		l.s.indexed.Store(tenant, struct{}{})
	}
	if failed != nil {
		// Stored, maybe, but not as the caller asked: not to be confirmed,
		// so not to be delivered either. The source sends it again.
		_, _ = l.Ack(context.WithoutCancel(ctx), tenant, seqs...)
		return nil, fmt.Errorf("store: append to tenant %q: %w", tenant, rerr(failed))
	}
	return seqs, nil
}

// seen is the highest seq s gave or read for tenant (zero: none).
func (s *redisStore) seen(tenant string) *atomic.Uint64 {
	if v, ok := s.highest.Load(tenant); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := s.highest.LoadOrStore(tenant, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// saw raises the highest seq s gave or read for tenant to seq.
func (s *redisStore) saw(tenant string, seq uint64) {
	h := s.seen(tenant)
	for old := h.Load(); seq > old && !h.CompareAndSwap(old, seq); old = h.Load() {
	}
}

// appendedSeqs are the seqs of n records appended from first (or -first,
// appendScript's answer when it took the prune marker).
func appendedSeqs(first int64, n int) []uint64 {
	seqs := make([]uint64, n)
	for i := range seqs {
		seqs[i] = uint64(max(first, -first)) + uint64(i)
	}
	return seqs
}

// forget removes the n records of an append whose caller stopped waiting
// (it was refused, so the source sends them again) once late says where
// they were stored, so they are not delivered twice.
func (l redisLedger) forget(tenant string, n int, late <-chan pipeReply) {
	if first, err := redisInt((<-late).cmd); err == nil {
		_, _ = l.Ack(context.Background(), tenant, appendedSeqs(first, n)...)
	}
}

// untakeScript: KEYS a tenant's prune marker, which it deletes if an
// append took it (it is past 1); one Forget set again meanwhile stays.
var untakeScript = redis.NewScript(`
if (tonumber(redis.call('GET', KEYS[1])) or 0) > 1 then return redis.call('DEL', KEYS[1]) end
return 0
`)

// untake removes tenant's prune marker once an append that took it
// indexed the tenant. Until then (its index failed, its caller gave up, its
// instance stopped) every append of the tenant, from any store, takes the
// marker and indexes it: none is confirmed outside the ledgers set.
func (l redisLedger) untake(ctx context.Context, tenant string) {
	_ = untakeScript.Run(ctx, l.s.c, []string{l.prunedKey(tenant)}).Err()
}

func (l redisLedger) Stage(ctx context.Context, tenant string, recs []Record) ([]uint64, func() error, error) {
	return staged(l.Append(ctx, tenant, recs))
}

// readLua: KEYS a tenant's stream; ARGV the id to read after (an
// exclusive start), the most entries and the most payload bytes (0: no
// bound). It answers as XRANGE does, up to the entry whose payload (field
// d) takes the answer's to the bound or past it (Ledger.Read), reading the
// stream a page at a time so the server holds no more either.
const readLua = `
local from, left, bound, size, out = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), 0, {}
while left > 0 do
  local n = math.min(left, 64)
  local page = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', n)
  for i = 1, #page do
    out[#out + 1] = page[i]
    local f = page[i][2]
    for j = 1, #f, 2 do
      if f[j] == 'd' then size = size + string.len(f[j + 1]) end
    end
    if bound > 0 and size >= bound then return out end
  end
  if #page < n then return out end
  left, from = left - n, '(' .. page[n][1]
end
return out
`

var readScript = redis.NewScript(readLua)

// readCall is the pipelined call of readLua, whose answer is read as
// XRANGE's.
func readCall(key, start string, max int, maxBytes int64) pipeCall {
	send := func(cmd, script string) func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			c := redis.NewXMessageSliceCmd(ctx, cmd, script, 1, key, start, max, maxBytes)
			_ = p.Process(ctx, c)
			return c
		}
	}
	return pipeCall{key: key, queue: send("evalsha", readScript.Hash()), reload: send("eval", readLua)}
}

func (l redisLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]Record, error) {
	if err := checkReadArgs(tenant, max); err != nil {
		return nil, err
	}
	if afterSeq == math.MaxUint64 {
		return nil, ctx.Err()
	}
	key, start := l.keys(tenant)[1], "(0-"+strconv.FormatUint(afterSeq, 10)
	call := pipeCall{key: key, queue: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.XRangeN(ctx, key, start, "+", int64(max))
	}}
	if maxBytes > 0 { // summing the bytes takes a script, several times XRANGE's cost on the server
		call = readCall(key, start, max, maxBytes)
	}
	cmd := l.s.pipelined(ctx, call).cmd
	var msgs []redis.XMessage
	err := cmd.Err()
	if xc, ok := cmd.(*redis.XMessageSliceCmd); ok && err == nil {
		msgs = xc.Val()
	}
	if err != nil {
		return nil, fmt.Errorf("store: read tenant %q: %w", tenant, rerr(err))
	}
	out := make([]Record, 0, len(msgs))
	for _, m := range msgs {
		seq, ok := streamSeq(m.ID)
		if !ok {
			return out, l.dropForeign(ctx, tenant, m.ID, afterSeq, out)
		}
		r, err := streamRecord(seq, m)
		if err != nil {
			return out, fmt.Errorf("store: read tenant %q: %w", tenant, &UnreadableRecord{Seq: seq})
		}
		out = append(out, r)
	}
	if len(out) > 0 {
		l.s.saw(tenant, out[len(out)-1].Seq)
	}
	return out, nil
}

// foreignScript removes the entry ARGV[1] of a stream, which the connector
// did not write (its id is not 0-<seq>, so above all of the connector's),
// and, unless another such entry remains on top, sets the stream's last id
// back to 0-<the tenant's last seq> (XSETID), or the appends after it
// would all fail (an id at or below the stream's top one). A counter
// behind the top entry, or holding no number (lost, set by hand, raised
// only by the appends this entry failed), moves past the next multiple of
// 2^32 above it first, as appendScript's does.
var foreignScript = redis.NewScript(pastLua + `
redis.call('XDEL', KEYS[2], ARGV[1])
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #top == 0 or string.sub(top[1][1], 1, 2) == '0-' then
  local last = tonumber(redis.pcall('GET', KEYS[1]) or '') or 0
  local seq = #top > 0 and tonumber(string.sub(top[1][1], 3)) or 0
  if last < seq then
    last = past(seq)
    redis.call('SET', KEYS[1], last)
  end
  redis.call('XSETID', KEYS[2], string.format('0-%d', last))
end
return 1
`)

// dropForeign removes tenant's stream entry id, which the connector did
// not write, and returns the *UnreadableRecord that tells Read's caller,
// or the error that kept it from being removed.
func (l redisLedger) dropForeign(ctx context.Context, tenant, id string, afterSeq uint64, before []Record) error {
	if err := foreignScript.Run(ctx, l.s.c, l.keys(tenant)[:2], id).Err(); err != nil {
		return fmt.Errorf("store: read tenant %q: remove entry %s: %w", tenant, id, rerr(err))
	}
	if len(before) > 0 {
		afterSeq = before[len(before)-1].Seq
	}
	return fmt.Errorf("store: read tenant %q: %w", tenant, &UnreadableRecord{Seq: afterSeq, ForeignID: id})
}

// streamRecord decodes the ledger stream entry of seq.
func streamRecord(seq uint64, m redis.XMessage) (Record, error) {
	field := func(name string) string {
		v, _ := m.Values[name].(string)
		return v
	}
	kind, err1 := strconv.ParseUint(field("k"), 10, 8)
	received, err2 := strconv.ParseInt(field("r"), 10, 64)
	var gen int64
	var err3 error
	if g := field("g"); g != "" { // none in a record an older version stored
		gen, err3 = strconv.ParseInt(g, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil {
		return Record{}, errCorrupt
	}
	return Record{
		Seq: seq, Kind: uint8(kind), Platform: field("p"), SessionKey: field("s"), ChatID: field("c"),
		Payload: []byte(field("d")), Received: time.UnixMicro(received), Generation: gen,
	}, nil
}

// streamSeq parses a ledger stream id, 0-<seq>.
func streamSeq(id string) (uint64, bool) {
	s, ok := strings.CutPrefix(id, "0-")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil
}

// ackScript deletes the entries 0-<seq> for each seq in ARGV from the
// third on and keeps the bytes counter; its first two ARGV and last two
// KEYS are its answer's (answerLua).
var ackScript = redis.NewScript(answerLua + `
local removed, size = 0, 0
for i = 3, #ARGV do
  local id = '0-' .. ARGV[i]
  local e = redis.call('XRANGE', KEYS[1], id, id)
  if #e > 0 then
    local f = e[1][2]
    for j = 1, #f, 2 do
      if f[j] == 'd' then size = size + string.len(f[j + 1]) end
    end
    redis.call('XDEL', KEYS[1], id)
    removed = removed + 1
  end
end
if removed == 0 then return 0 end
addBytes(KEYS[1], KEYS[2], -size)
return answer(removed)
`)

func (l redisLedger) Ack(ctx context.Context, tenant string, seqs ...uint64) (int, error) {
	return l.AckAll(ctx, map[string][]uint64{tenant: seqs})
}

// AckAll sends one ack script call per tenant, all in the same pipeline.
func (l redisLedger) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	if err := checkAckAllArgs(acks); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	calls := make([]pipeCall, 0, len(acks))
	for tenant, seqs := range acks {
		if len(seqs) > 0 {
			calls = append(calls, scriptCall(ackScript, append(l.keys(tenant)[1:], l.answerKeys(tenant)...), l.ackArgs(seqs)...))
		}
	}
	removed := 0
	var errs []error
	for _, r := range l.s.pipelinedAll(ctx, calls) {
		n, err := redisInt(r.cmd)
		if err != nil {
			errs = append(errs, rerr(err))
			continue
		}
		removed += int(n)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("store: ack: %w", errors.Join(errs...))
	}
	return removed, nil
}

// ackArgs are ackScript's ARGV: its answer's id and PX, then seqs.
func (l redisLedger) ackArgs(seqs []uint64) []any {
	args := make([]any, 0, 2+len(seqs))
	args = append(args, rand.Text(), pxMillis(l.s.resend))
	for _, seq := range seqs {
		args = append(args, strconv.FormatUint(seq, 10))
	}
	return args
}

// redisInt is a script's integer reply.
func redisInt(cmd redis.Cmder) (int64, error) {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return 0, cmd.Err()
	}
	return c.Int64()
}

// trimScript is trimRule.drop over the stream, oldest first: KEYS the
// stream and its bytes counter, then its answer's (answerLua); ARGV its
// answer's, then the max entries, max bytes and the cutoff in Unix µs (0:
// none). It returns {id, kind, platform, bytes, received} per dropped
// entry, which a resend of the trim would find gone. An entry whose
// receipt time does not decode (another program or version wrote it) is
// older than any cutoff: no instance can read it (Read). It stops at an
// entry the connector did not write, which Read removes (foreignScript).
var trimScript = redis.NewScript(answerLua + `
local maxN, maxB, cutoff = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n = redis.call('XLEN', KEYS[1])
local ok, b = pcall(redis.call, 'GET', KEYS[2])
b = ok and tonumber(b or '0')
if not b then
  addBytes(KEYS[1], KEYS[2], 0)
  b = tonumber(redis.call('GET', KEYS[2]))
end
local out = {}
local start = '-'
local done = false
while not done and n > 0 do
  local es = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 128)
  if #es == 0 then break end
  for _, e in ipairs(es) do
    if string.sub(e[1], 1, 2) ~= '0-' then
      -- Not the connector's (above all of its own): Read removes it.
      done = true
      break
    end
    local f, v = e[2], {}
    for j = 1, #f, 2 do v[f[j]] = f[j + 1] end
    local size, r = string.len(v['d'] or ''), tonumber(v['r'] or '0') or 0
    if not ((maxN > 0 and n > maxN) or (maxB > 0 and b > maxB) or (cutoff ~= 0 and r < cutoff)) then
      done = true
      break
    end
    redis.call('XDEL', KEYS[1], e[1])
    n = n - 1
    b = b - size
    out[#out + 1] = {e[1], v['k'] or '0', v['p'] or '', size, v['r'] or '0'}
  end
  start = '(' .. es[#es][1]
end
if #out == 0 then return out end
redis.call('SET', KEYS[2], b)
return answer(out)
`)

func (l redisLedger) Trim(ctx context.Context, tenant string, bounds Bounds) ([]Dropped, error) {
	if err := checkName("tenant", tenant); err != nil {
		return nil, err
	}
	rule := bounds.at(l.s.clock.Now())
	keys := append(l.keys(tenant)[1:], l.answerKeys(tenant)...)
	// Pipelined: on a Redis Cluster it is then sent once (resendWindow).
	cmd := l.s.pipelined(ctx, scriptCall(trimScript, keys, rand.Text(), pxMillis(l.s.resend), rule.maxEntries, rule.maxBytes, rule.cutoff)).cmd
	var res []any
	err := cmd.Err()
	if c, ok := cmd.(*redis.Cmd); ok && err == nil {
		res, err = c.Slice()
	}
	if err != nil {
		return nil, fmt.Errorf("store: trim tenant %q: %w", tenant, rerr(err))
	}
	out := make([]Dropped, 0, len(res))
	for _, row := range res {
		d, ok := trimmedEntry(row)
		if !ok {
			return out, fmt.Errorf("store: trim tenant %q: %w", tenant, errCorrupt)
		}
		out = append(out, d)
	}
	return out, nil
}

// trimmedEntry decodes one row of trimScript's reply.
func trimmedEntry(row any) (Dropped, bool) {
	f, ok := row.([]any)
	if !ok || len(f) != 5 {
		return Dropped{}, false
	}
	id, _ := f[0].(string)
	kind, _ := f[1].(string)
	platform, _ := f[2].(string)
	size, _ := f[3].(int64)
	received, _ := f[4].(string)
	seq, ok := streamSeq(id)
	if !ok {
		return Dropped{}, false
	}
	// A kind or receipt time that does not decode (another program or
	// version wrote it; the script took such a record as expired) is
	// reported as zero: the record is gone either way.
	k, _ := strconv.ParseUint(kind, 10, 8)
	d := Dropped{Seq: seq, Kind: uint8(k), Platform: platform, Bytes: int(size)}
	if r, err := strconv.ParseInt(received, 10, 64); err == nil {
		d.Received = time.UnixMicro(r)
	}
	return d, true
}

func (l redisLedger) Stats(ctx context.Context, tenant string) (Stats, error) {
	if err := checkName("tenant", tenant); err != nil {
		return Stats{}, err
	}
	var n *redis.IntCmd
	var b *redis.StringCmd
	keys := l.keys(tenant)[1:]
	_, err := l.s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.XLen(ctx, keys[0])
		b = p.Get(ctx, keys[1])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("store: stats of tenant %q: %w", tenant, rerr(err))
	}
	bytes, err := b.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("store: stats of tenant %q: %w", tenant, err)
	}
	return Stats{Entries: int(n.Val()), Bytes: bytes}, nil
}

// Tenants reads the tenants that ever appended, then their streams'
// lengths (one pipeline per server), and keeps those with entries.
func (l redisLedger) Tenants(ctx context.Context) ([]string, error) {
	all, err := l.s.c.SMembers(ctx, l.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: tenants: %w", rerr(err))
	}
	// A tenant this store added and the set lost (on a Cluster its shard
	// failed over before it had the SADD, or restarted without its data)
	// goes back in; one Forget dropped (its prune marker is still there) is
	// forgotten here too.
	listed := make(map[string]bool, len(all))
	for _, t := range all {
		listed[t] = true
	}
	var lost []any
	var marks []*redis.IntCmd
	_, err = l.s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		l.s.indexed.Range(func(t, _ any) bool {
			if !listed[t.(string)] {
				lost = append(lost, t)
				marks = append(marks, p.Exists(ctx, l.prunedKey(t.(string))))
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: tenants: %w", rerr(err))
	}
	for i := len(lost) - 1; i >= 0; i-- {
		if marks[i].Val() == 1 {
			l.s.unindexed(lost[i].(string))
			lost = slices.Delete(lost, i, i+1)
		}
	}
	if len(lost) > 0 {
		if err := l.s.c.SAdd(ctx, l.indexKey(), lost...).Err(); err != nil {
			return nil, fmt.Errorf("store: tenants: %w", rerr(err))
		}
		for _, t := range lost {
			all = append(all, t.(string))
		}
	}
	lens := make([]*redis.IntCmd, len(all))
	_, _ = l.s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range all {
			lens[i] = p.XLen(ctx, l.keys(t)[1])
		}
		return nil
	})
	var out []string
	for i, t := range all {
		// A key of another type (another program's) holds no records: it
		// fails no other tenant's recovery.
		n, err := lens[i].Result()
		if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, fmt.Errorf("store: tenants: %w", rerr(err))
		}
		if n > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// forgetScript: KEYS a tenant's stream, bytes counter and prune marker.
// Unless the stream holds entries, it deletes the stream and the counter,
// sets the marker and returns 1.
var forgetScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1])['ok'] == 'stream' and redis.call('XLEN', KEYS[1]) > 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], '1')
return 1
`)

// unindexScript: KEYS the ledgers set and the numbered hash; ARGV a
// tenant, which it removes from both.
var unindexScript = redis.NewScript(`
redis.call('SREM', KEYS[1], ARGV[1])
return redis.call('HDEL', KEYS[2], ARGV[1])
`)

// Forget implements Ledger. A look that failed again (relook) is the
// error it returns unless another comes first, so the sweep logs it.
func (l redisLedger) Forget(ctx context.Context, keep func(string) bool) (n int, err error) {
	var relookErr error
	l.s.relook.Range(func(t, _ any) bool {
		if _, err := l.look(ctx, t.(string)); err != nil {
			relookErr = cmp.Or(relookErr, fmt.Errorf("store: forget tenant %q: look again: %w", t, rerr(err)))
		} else {
			l.s.relook.Delete(t)
		}
		return true
	})
	defer func() { err = cmp.Or(err, relookErr) }()
	all, err := l.s.c.SMembers(ctx, l.indexKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("store: forget tenants: %w", rerr(err))
	}
	for _, t := range all {
		if keep(t) {
			continue
		}
		dropped, err := l.forgetTenant(ctx, t)
		if err != nil {
			return n, fmt.Errorf("store: forget tenant %q: %w", t, rerr(err))
		}
		if dropped {
			n++
		}
	}
	return n, nil
}

// forgetTenant drops tenant from the ledgers set and the numbered hash
// unless its stream holds entries, and reports whether it did. It sets the
// tenant's prune marker first: an append that follows takes it and indexes
// the tenant again, whichever store made it (one whose indexed still
// holds the tenant too), and one that took it before the removal, whose
// index the removal may have undone, is indexed again here (look), or by
// the next Forget when the removal or the look failed: the appending store
// may be gone before its own sweep adds the tenant back (Tenants).
func (l redisLedger) forgetTenant(ctx context.Context, tenant string) (bool, error) {
	k := l.keys(tenant)
	mark := scriptCall(forgetScript, []string{k[1], k[2], l.prunedKey(tenant)})
	mark.replicate = true
	reply := l.s.pipelined(ctx, mark)
	if n, err := redisInt(reply.cmd); err != nil || n == 0 || reply.unreplicated != nil {
		return false, cmp.Or(err, reply.unreplicated)
	}
	l.s.unindexed(tenant)
	// Once the tenant may be out of the set, the look below runs even when
	// ctx ends (a shutdown, the sweep's deadline): an append that indexed
	// the tenant before the removal would stay out of it otherwise.
	ctx = context.WithoutCancel(ctx)
	err := unindexScript.Run(ctx, l.s.c, l.indexKeys(), tenant).Err()
	if err == nil {
		var dropped bool
		if dropped, err = l.look(ctx, tenant); err == nil {
			return dropped, nil
		}
	}
	l.s.relook.Store(tenant, struct{}{})
	return false, err
}

// look indexes tenant again, which Forget removed from the index, unless
// its prune marker is still 1 (no append took it since it was set), and
// reports whether it was.
func (l redisLedger) look(ctx context.Context, tenant string) (bool, error) {
	if marker, err := l.s.c.Get(ctx, l.prunedKey(tenant)).Result(); marker == "1" || err != nil && !errors.Is(err, redis.Nil) {
		return marker == "1", err
	}
	last, _ := l.s.c.Get(ctx, l.keys(tenant)[0]).Uint64() // a counter that holds no number: none
	_, err := l.index(ctx, tenant, last)
	return false, err
}

// unindexed forgets what s kept of tenant once Forget dropped it.
func (s *redisStore) unindexed(tenant string) {
	s.indexed.Delete(tenant)
	s.highest.Delete(tenant)
}

// expKey is the key of the expiring value (a, b) (expiringStore).
func (s *redisStore) expKey(owner bool, a, b string) string {
	if owner {
		return s.p + "owner:" + strconv.Itoa(len(a)) + ":" + tagged(a) + b
	}
	return s.p + "cap:" + a
}

// putExpiring keeps the key redisExpirySlack past the value's expiry. A
// capability is written before the event it came with is confirmed (a
// Discord interaction's token), so it waits for the replicas too.
func (s *redisStore) putExpiring(ctx context.Context, owner bool, a, b string, value []byte, expires time.Time) error {
	k, v := s.expKey(owner, a, b), encodeExpiring(expires, value)
	ttl := max(expires.Sub(s.clock.Now()), 0) + redisExpirySlack
	if owner {
		return rerr(s.c.Set(ctx, k, v, ttl).Err())
	}
	put := pipeCall{key: k, replicate: true, queue: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.Set(ctx, k, v, ttl)
	}}
	return rerr(s.pipelined(ctx, put).err())
}

// putLaterScript: KEYS the capability; ARGV the value as stored, the
// generation, PX, now in seconds and nanoseconds. Sets the value unless
// the stored one is live (its expiry, encodeExpiring's first 12 bytes,
// after now) and of a later generation (Later, which it mirrors: cjson
// reads strict JSON numbers, as Go does, and its setting is put back,
// though a script killed while it is off leaves it off, which no other
// script here minds: answerLua decodes only what cjson encoded). Where
// cjson reads a value unlike Go, the script brings it in line first: a
// '.' outside strings without a digit on both sides (5., -.5, which
// strtod takes and JSON does not) makes the value no JSON, as does a
// control character in a string or a NUL (cjson takes both, stopping at
// the NUL), and a surrogate escape (cjson refuses a lone one, Go reads it
// as U+FFFD) is read as U+FFFD.
// Nesting past 1,000, which no version writes, is still no JSON here and
// read there. Returns 1 when it set it.
var putLaterScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'string' and #cur >= 12 then
  local hi, lo, ns = struct.unpack('>I4I4I4', cur)
  local s, nows, nowns = hi * 4294967296 + lo, tonumber(ARGV[4]), tonumber(ARGV[5])
  if s > nows or (s == nows and ns > nowns) then
    local doc = string.sub(cur, 13)
    local bad = string.find(doc, '%z')
    local bare = ' ' .. string.gsub(string.gsub(doc, '\\.', ''), '"[^"]*"', function(str)
      if string.find(str, '[\1-\31]') then bad = true end
      return '""'
    end) .. ' '
    doc = string.gsub(doc, '\\(.%x?%x?%x?%x?)', function(e)
      if string.find(e, '^u[dD][89a-fA-F]%x%x$') then return '\\ufffd' end
    end)
    local lax = cjson.decode_invalid_numbers()
    cjson.decode_invalid_numbers(false)
    local ok, v = pcall(cjson.decode, doc)
    cjson.decode_invalid_numbers(lax)
    if bad or string.find(bare, '%D%.') or string.find(bare, '%.%D') then ok = false end
    local c = nil
    if ok and type(v) == 'table' then c = v.c end
    if c ~= nil and c ~= cjson.null and (type(c) ~= 'number' or c ~= math.floor(c) or c > tonumber(ARGV[2])) then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
`)

// putCapUnlessLater waits for the replicas as putExpiring does.
func (s *redisStore) putCapUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (bool, error) {
	now := s.clock.Now()
	put := scriptCall(putLaterScript, []string{s.expKey(false, key, "")}, encodeExpiring(expires, value), gen,
		pxMillis(max(expires.Sub(now), 0)+redisExpirySlack), now.Unix(), now.Nanosecond())
	put.replicate = true
	r := s.pipelined(ctx, put)
	if err := r.err(); err != nil {
		return false, rerr(err)
	}
	n, err := redisInt(r.cmd)
	return n == 1, rerr(err)
}

func (s *redisStore) getLive(ctx context.Context, owner bool, a, b string) ([]byte, bool, error) {
	v, err := s.c.Get(ctx, s.expKey(owner, a, b)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
		return nil, false, errCorrupt
	case err != nil:
		return nil, false, rerr(err)
	}
	value, expires, err := decodeExpiring(v)
	if err != nil || expired(s.clock.Now(), expires) {
		return nil, false, err
	}
	return value, true, nil
}

func (s *redisStore) delExpiring(ctx context.Context, owner bool, a, b string) error {
	return rerr(s.c.Del(ctx, s.expKey(owner, a, b)).Err())
}

// claimKeptLua: kept(cur, id, s, ns) is whether the stored claim cur
// outlasts the caller's: the key's PX is the claim's expiry by the
// server's clock, so a claim present is live, and one of another instance
// (id, the value's digits before the last 18) is kept whatever either
// instance's clock says; one of the caller's instance is kept when its
// expiry, in that instance's clock, is after s, ns (seconds and
// nanoseconds apart, as Lua numbers are doubles). A value that does not
// read as a claim is not kept, nor is an earlier version's probe (a
// dedupe's, until 1 s past 1970), which that version stored for a minute.
// A stored nanosecond field's last nine digits are the nanoseconds, the
// nine before them a tag that makes each write's value its own.
const claimKeptLua = `
local function kept(cur, id, s, ns)
  local cs, f = string.match(cur, '^(%d+) (%d+)$')
  if not cs or cs == '1' then return false end
  if string.sub(f, 1, -19) ~= id then return true end
  cs, ns, s = tonumber(cs), tonumber(ns), tonumber(s)
  local cns = tonumber(string.sub(f, -9))
  return cs > s or (cs == s and cns > ns)
end
`

// claimScript: KEYS claim; ARGV this instance's id, the caller's held
// expiry in seconds and nanoseconds (0 0: none), the claim's value, its
// PX (0: it lapsed already). Takes the claim unless one kept (claimKeptLua)
// holds it, or finds the very value it sets: its own write, sent again by
// go-redis after a lost reply. Returns 1 when it took it.
var claimScript = redis.NewScript(claimKeptLua + `
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[4] then return 1 end
if cur and kept(cur, ARGV[1], ARGV[2], ARGV[3]) then return 0 end
if ARGV[5] == '0' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5]) end
return 1
`)

// claimValue is a claim's value, "<Unix s> <instance id><tag, 9
// digits><ns, 9 digits>", and its PX: the time left until expires by this
// instance's clock, which the server counts down by its own (0 when none
// is left).
func (s *redisStore) claimValue(expires time.Time) (string, int64) {
	px := int64(0)
	if left := expires.Sub(s.clock.Now()); left > 0 {
		px = pxMillis(left)
	}
	return fmt.Sprintf("%d %s%09d%09d", expires.Unix(), s.id, mathrand.Int64N(1e9), expires.Nanosecond()), px
}

// claim is claims' claim: claimScript. A claim taken counts only once the
// replicas have it (Config.RedisMinReplicas), as an append does: one a
// failover lost would let a second caller act on the key (a nexscope
// action run twice). Else it fails with ErrNotReplicated, and a claim it
// took is released again, so the caller's retry is not refused by it; so
// is one the server took after the caller stopped waiting (ctx ended). A
// probe (expires already past: it holds nothing, a dedupe's look for a
// done marker) waits for no replica.
func (s *redisStore) claim(ctx context.Context, key string, held, expires time.Time) (bool, error) {
	exp, px := s.claimValue(expires)
	var hs, hns int64
	if !held.IsZero() {
		hs, hns = held.Unix(), int64(held.Nanosecond())
	}
	call := scriptCall(claimScript, []string{key}, s.id, hs, hns, exp, px)
	call.replicate = px > 0
	reply := s.pipelined(ctx, call)
	n, err := redisInt(reply.cmd)
	if held.IsZero() && reply.late != nil {
		go func() {
			if n, err := redisInt((<-reply.late).cmd); err == nil && n == 1 {
				_ = s.releaseClaim(context.Background(), key, expires)
			}
		}()
	}
	if err == nil && n == 1 && reply.unreplicated != nil {
		if held.IsZero() {
			_ = s.releaseClaim(context.WithoutCancel(ctx), key, expires)
		}
		err = reply.unreplicated
	}
	return err == nil && n == 1, rerr(err)
}

// holdClaim is claims' hold; it counts once the replicas have it, as a
// claim does (a dedupe's done marker).
func (s *redisStore) holdClaim(ctx context.Context, key string, expires time.Time) error {
	exp, px := s.claimValue(expires)
	reply := s.pipelined(ctx, pipeCall{key: key, replicate: true, queue: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		if px == 0 {
			return p.Del(ctx, key)
		}
		return p.Set(ctx, key, exp, time.Duration(px)*time.Millisecond)
	}})
	return rerr(cmp.Or(reply.cmd.Err(), reply.unreplicated))
}

// releaseScript: KEYS claim; ARGV this instance's id, the expiry's seconds
// and nanoseconds. Deletes the claim unless it is kept (claimKeptLua).
var releaseScript = redis.NewScript(claimKeptLua + `
local cur = redis.call('GET', KEYS[1])
if cur and kept(cur, ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// releaseClaim is claims' release: releaseScript.
func (s *redisStore) releaseClaim(ctx context.Context, key string, expires time.Time) error {
	return rerr(releaseScript.Run(ctx, s.c, []string{key}, s.id, expires.Unix(), expires.Nanosecond()).Err())
}

type redisLeases struct{ s *redisStore }

// acquireScript: KEYS lease, token counter; ARGV holder, ttl ms. Returns
// {acquired 0/1, token, holder, remaining ms}. A value that is no lease
// ("<token>:<holder>", a token of at most 19 digits, which a uint64 holds;
// another program's) is taken over as a free one. A counter INCR does not
// take (another program's) moves past the next multiple of 2^32 above
// the number it begins with, as a lost seq counter does (appendScript), so
// the tokens still grow; a number of 19 digits or more, past the tokens
// INCR gives, counts as none (taken for one, the counter moved past what
// a token's string takes, and every acquisition failed).
var acquireScript = redis.NewScript(pastLua + `
local token, holder = string.match(redis.call('GET', KEYS[1]) or '', '^(%d+):(.*)$')
if token and #token < 20 then
  if holder ~= ARGV[1] then
    return {0, token, holder, redis.call('PTTL', KEYS[1])}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, holder, tonumber(ARGV[2])}
end
local next = redis.pcall('INCR', KEYS[2])
if type(next) == 'table' then
  local ok, cur = pcall(redis.call, 'GET', KEYS[2])
  cur = ok and string.match(cur, '^%d+') or ''
  cur = #cur < 19 and tonumber(cur) or 0
  next = past(cur) + 1
  redis.call('SET', KEYS[2], string.format('%d', next))
end
local token = string.format('%d', next)
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, token, ARGV[1], tonumber(ARGV[2])}
`)

// heldScript: KEYS lease and, for a release, its answer; ARGV
// "<token>:<holder>", ttl ms, the answer's PX. When that is the lease,
// renews it for the ttl, or releases it when the ttl is 0, and returns 1;
// else returns 0. A release's answer (its key fresh for each) is kept, as
// a registry write's is, for a resend of the release, which would find the
// lease gone.
var heldScript = redis.NewScript(`
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

// dropScript: KEYS lease, token counter. Deletes the counter unless the
// lease is held.
var dropScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('DEL', KEYS[2])
`)

// holderScript: KEYS lease. Returns {value, remaining ms} or nil.
var holderScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
`)

// keys are the lease name's key and its fencing token counter.
func (ls redisLeases) keys(name string) []string {
	p, tag := ls.s.p, tagged(name)
	return []string{p + "lease:" + tag, p + "leasetoken:" + tag}
}

// lease builds a Lease from its token and holder and the remaining TTL.
func (ls redisLeases) lease(token, holder string, pttl int64) (Lease, error) {
	t, err := strconv.ParseUint(token, 10, 64)
	if err != nil || len(token) > 19 { // as acquireScript reads it
		return Lease{}, errCorrupt
	}
	return Lease{Holder: holder, Token: t, Expires: ls.s.clock.Now().Add(time.Duration(pttl) * time.Millisecond)}, nil
}

func (ls redisLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error) {
	if err := checkLeaseArgs(name, holder, ttl); err != nil {
		return Lease{}, false, err
	}
	call := leaseCall(acquireScript, ttl, ls.keys(name), holder, pxMillis(ttl))
	reply := ls.s.pipelined(ctx, call)
	var res []any
	err := reply.cmd.Err()
	if c, ok := reply.cmd.(*redis.Cmd); ok && err == nil {
		res, err = c.Slice()
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("store: acquire lease %q: %w", name, rerr(err))
	}
	if len(res) != 4 {
		return Lease{}, false, fmt.Errorf("store: acquire lease %q: %w", name, errCorrupt)
	}
	acquired, _ := res[0].(int64)
	token, _ := res[1].(string)
	cur, _ := res[2].(string)
	pttl, _ := res[3].(int64)
	l, err := ls.lease(token, cur, pttl)
	if err != nil {
		return Lease{}, false, fmt.Errorf("store: acquire lease %q: %w", name, err)
	}
	if acquired == 1 && reply.unreplicated != nil {
		// Taken, or extended, on the primary only: a failover could lose
		// it (and its fencing token), so it is not the holder's yet. It
		// expires on its own; the holder's next bid extends it and counts
		// once the replicas have it.
		return Lease{}, false, fmt.Errorf("store: acquire lease %q: %w", name, reply.unreplicated)
	}
	return l, acquired == 1, nil
}

// leaseCall is the pipelined call of a lease script that writes: with
// Config.RedisMinReplicas it counts only once the replicas have it, and
// waits for them at most a renewal period of ttl (Tenure), so a slow
// replica cannot make a renewal outlast its period.
func leaseCall(script *redis.Script, ttl time.Duration, keys []string, args ...any) pipeCall {
	call := scriptCall(script, keys, args...)
	call.replicate, call.waitAtMost = true, ttl/RenewEvery
	return call
}

func (ls redisLeases) Renew(ctx context.Context, name string, l Lease, ttl time.Duration) (Lease, error) {
	if err := checkLeaseArgs(name, l.Holder, ttl); err != nil {
		return Lease{}, err
	}
	if err := ls.ifHeld(ctx, "renew", name, l, ttl); err != nil {
		return Lease{}, err
	}
	l.Expires = ls.s.clock.Now().Add(ttl)
	return l, nil
}

func (ls redisLeases) Release(ctx context.Context, name string, l Lease) error {
	if err := checkName("lease name", name); err != nil {
		return err
	}
	return ls.ifHeld(ctx, "release", name, l, 0)
}

// ifHeld runs heldScript: it renews l for ttl, or releases it when ttl is
// 0, and fails with ErrNotHeld when l is not the lease. A renewal counts
// only once the replicas have it (leaseCall), else it fails with
// ErrNotReplicated; a release does not wait for them (a lost release
// leaves the lease to expire).
func (ls redisLeases) ifHeld(ctx context.Context, op, name string, l Lease, ttl time.Duration) error {
	keys, v := ls.keys(name)[:1], strconv.FormatUint(l.Token, 10)+":"+l.Holder
	var call pipeCall
	if ttl > 0 {
		call = leaseCall(heldScript, ttl, keys, v, pxMillis(ttl))
	} else {
		call = scriptCall(heldScript, append(keys, ls.s.p+"leaseanswer:"+tagged(name)+":"+rand.Text()), v, 0, pxMillis(ls.s.resend))
	}
	reply := ls.s.pipelined(ctx, call)
	ok, err := redisInt(reply.cmd)
	if err != nil {
		return fmt.Errorf("store: %s lease %q: %w", op, name, rerr(err))
	}
	if ok != 1 {
		return ErrNotHeld
	}
	if reply.unreplicated != nil {
		return fmt.Errorf("store: %s lease %q: %w", op, name, reply.unreplicated)
	}
	return nil
}

func (ls redisLeases) Drop(ctx context.Context, name string) error {
	if err := checkName("lease name", name); err != nil {
		return err
	}
	if err := dropScript.Run(ctx, ls.s.c, ls.keys(name)).Err(); err != nil {
		return fmt.Errorf("store: drop lease %q: %w", name, rerr(err))
	}
	return nil
}

func (ls redisLeases) Holder(ctx context.Context, name string) (Lease, bool, error) {
	if err := checkName("lease name", name); err != nil {
		return Lease{}, false, err
	}
	res, err := holderScript.Run(ctx, ls.s.c, ls.keys(name)[:1]).Slice()
	if errors.Is(err, redis.Nil) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("store: lease %q: %w", name, rerr(err))
	}
	v, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	token, holder, ok := strings.Cut(v, ":")
	l, err := ls.lease(token, holder, pttl)
	// A value that is no lease (another program's) holds none: Acquire
	// takes it over.
	return l, ok && err == nil, nil
}

// registryKeys are namespace's hash and revision.
func (s *redisStore) registryKeys(namespace string) []string {
	tag := tagged(namespace)
	return []string{s.p + "registry:" + tag, s.p + "registryrev:" + tag}
}

// registryWriteScript is regWrite: KEYS hash, revision, the write's
// answer; ARGV key, when (regWhen), "1" when an entry is expected
// (regFrom; its value in ARGV[4]) else "0", "1" to remove key else "0"
// (store ARGV[6] as the entry: rev as 8 big-endian bytes, then the value),
// the answer's PX. Returns the new revision, or 0 when the write does not
// apply. The answer (its key fresh for each write) is kept ARGV[7] ms for
// a resend of the write, which go-redis makes after a lost reply and which,
// run again, would find its own value (docs/durability.md). A value that
// is no entry (another program's) is taken for none, but a Delete
// removes it.
var registryWriteScript = redis.NewScript(registryRevLua + `
local done = redis.call('GET', KEYS[3])
if done then return tonumber(done) end
revision()
local function answer(rev)
  redis.call('SET', KEYS[3], rev, 'PX', ARGV[7])
  return rev
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and ARGV[2] ~= '1' and (#cur < 8 or cur:byte(1) >= 8) then cur = nil end
if ARGV[2] == '1' and not cur then return answer(0) end
if ARGV[2] == '2' then
  if ARGV[3] == '1' then
    if not cur or string.sub(cur, 9) ~= ARGV[4] then return answer(0) end
  elseif cur then
    return answer(0)
  end
end
local rev = redis.call('INCR', KEYS[2])
if ARGV[5] == '1' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], struct.pack('>I8', rev) .. ARGV[6])
end
return answer(rev)
`)

// registryRevLua begins the registry's scripts (KEYS hash, revision):
// revision() returns the namespace's revision as a decimal string. A
// revision that is no number INCR takes (below 10^18), or one deleted while
// the namespace holds entries, moves past the next multiple of 2^32 above
// the highest revision an entry holds (past), so it never stops the
// namespace's writes nor goes back below one a reader saw. A value whose
// first eight bytes are 2^59 or more is no entry (decodeEntry): taken for
// one, it would move the revision to 10^18 or more, which this check does
// not take either.
const registryRevLua = pastLua + `
local function revision()
  local ok, cur = pcall(redis.call, 'GET', KEYS[2])
  if ok and (not cur and redis.call('HLEN', KEYS[1]) == 0 or cur == '0' or (cur and string.match(cur, '^[1-9]%d*$') and #cur < 19)) then
    return cur or '0'
  end
  local top = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
    if #v >= 8 and v:byte(1) < 8 then top = math.max(top, (struct.unpack('>I8', v))) end
  end
  local rev = string.format('%d', past(top))
  redis.call('SET', KEYS[2], rev)
  return rev
end
`

// registryListScript: KEYS hash, revision. Returns {rev, {key, entry, ...}}.
var registryListScript = redis.NewScript(registryRevLua + `
return {revision(), redis.call('HGETALL', KEYS[1])}
`)

// registryRevScript: KEYS hash, revision. Returns the revision.
var registryRevScript = redis.NewScript(registryRevLua + `
return revision()
`)

// writeRegistry is registry's write: registryWriteScript. A write
// that applied counts only once the replicas have it (Config.RedisMinReplicas),
// as an append does: a platform may confirm an event once it is in the
// registry (Slack's durable intake). Else it fails with ErrNotReplicated,
// the change left on the primary.
func (s *redisStore) writeRegistry(ctx context.Context, namespace string, w regWrite) (uint64, bool, error) {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	keys := append(s.registryKeys(namespace), s.p+"registryanswer:"+tagged(namespace)+":"+rand.Text())
	call := scriptCall(registryWriteScript, keys, w.key, int(w.when), flag(w.old != nil), w.old, flag(w.del), w.value, pxMillis(s.resend))
	call.replicate = true
	reply := s.pipelined(ctx, call)
	rev, err := redisInt(reply.cmd)
	if err == nil && rev > 0 {
		err = reply.unreplicated
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: registry %s: %w", w.op, rerr(err))
	}
	return uint64(rev), rev > 0, nil
}

func (s *redisStore) getRegistry(ctx context.Context, namespace, key string) (Entry, bool, error) {
	v, err := s.c.HGet(ctx, s.registryKeys(namespace)[0], key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("store: registry get: %w", rerr(err))
	}
	e, err := decodeEntry(key, v)
	return e, err == nil, nil
}

func (s *redisStore) listRegistry(ctx context.Context, namespace string) ([]Entry, uint64, error) {
	res, err := registryListScript.Run(ctx, s.c, s.registryKeys(namespace)).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("store: registry list: %w", rerr(err))
	}
	revText, _ := res[0].(string)
	rev, err := strconv.ParseUint(revText, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("store: registry list: revision: %w", errCorrupt)
	}
	flat, _ := res[1].([]any)
	var out []Entry
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		if e, err := decodeEntry(k, []byte(v)); err == nil {
			out = append(out, e)
		}
	}
	return out, rev, nil
}

func (s *redisStore) registryRevision(ctx context.Context, namespace string) (uint64, error) {
	rev, err := registryRevScript.Run(ctx, s.c, s.registryKeys(namespace)).Uint64()
	if err != nil {
		return 0, fmt.Errorf("store: registry revision: %w", rerr(err))
	}
	return rev, nil
}
