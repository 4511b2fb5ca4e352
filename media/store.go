// Package media is the connector's media store: attachments crossing the
// /relay wire by reference (hermes-wire.md §10). docs/contract.md "Media"
// gives its layout, ids, limits, expiry and routes. Bytes live in files
// under Config.Dir, streamed through a 64 KiB buffer, never whole in
// memory; the index is in memory, and files a previous process left are
// removed by New. An upload not ended within the longer of Config.TTL and
// Config.UploadTimeout is abandoned: the sweep removes it and releases its
// bytes.
//
// Objects come from three places: a gateway's upload (POST /relay/media,
// Handler), a platform re-hosting an inbound attachment (Begin, Put), and a
// send_media naming a public URL, which Resolve downloads into a temporary
// object removed when the send is done.
package media

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connector/internal/clock"
)

// Defaults of Config.
const (
	// DefaultMaxBytes is the largest object: 25 MiB, the gateway's
	// MEDIA_MAX_BYTES; an upload over it is answered 413.
	DefaultMaxBytes = 25 << 20
	// DefaultQuotaBytes bounds the bytes of every object together.
	DefaultQuotaBytes = 1 << 30
	// DefaultTenantQuotaBytes bounds the bytes of one tenant's objects.
	DefaultTenantQuotaBytes = 256 << 20
	// DefaultTTL is how long an object can be fetched after it was stored.
	DefaultTTL = time.Hour
)

// maxTenantObjects and maxObjects bound the objects (stored and in
// progress) of one tenant and of the store, whatever their size, so tiny
// uploads cannot fill memory (the index) and the disk's inodes within the
// byte quotas. Objects of 16 KiB on average reach the default quotas at
// these counts.
const (
	maxTenantObjects = 1 << 14
	maxObjects       = 1 << 16
)

// Errors of the store. Their text carries no id, tenant or path.
var (
	// ErrNotFound: no object of this tenant has the id (unknown, expired,
	// or another tenant's: the three are indistinguishable on purpose).
	ErrNotFound = errors.New("media: unknown or expired media id")
	// ErrTooLarge: the object exceeds Config.MaxBytes.
	ErrTooLarge = errors.New("media: object exceeds the size limit")
	// ErrQuota: storing the object would exceed the tenant's or the store's
	// quota, or their object count, even after expired objects were
	// removed.
	ErrQuota = errors.New("media: storage quota exhausted")
)

// Config configures a Store: the connector's media section, whose keys
// are the yaml tags (docs/configuration.md). Zero values mean the defaults
// (WithDefaults).
type Config struct {
	// PublicURL is the base URL gateways reach this connector at: their
	// GATEWAY_RELAY_URL with ws(s) turned into http(s) and /relay dropped,
	// e.g. https://connector.example.com. Inbound attachments behind a
	// platform credential (Telegram files, nexscope files sent to the bot)
	// are re-hosted at <public_url>/relay/media/<id>; without it they
	// reach gateways as their caption only. A send_media source_url on this
	// host names an uploaded object. Default none.
	PublicURL string `yaml:"public_url"`
	// Dir holds the media files (mode 0700; emptied at start). It is
	// locked while the connector runs: a second instance given the same
	// directory fails to start. Default the media directory in the data
	// directory (store.path/media).
	Dir string `yaml:"dir"`
	// MaxBytes bounds one upload or re-hosted attachment; a larger upload
	// is answered 413. At most quota_bytes and tenant_quota_bytes. Default
	// 26214400 (25 MiB, the gateway's own cap).
	MaxBytes int64 `yaml:"max_bytes"`
	// QuotaBytes bounds the bytes of every stored object together; an
	// upload past it is answered 507 once expired objects are removed.
	// Default 1073741824 (1 GiB).
	QuotaBytes int64 `yaml:"quota_bytes"`
	// TenantQuotaBytes bounds one tenant's stored objects. Default
	// 268435456 (256 MiB), or quota_bytes when lower.
	TenantQuotaBytes int64 `yaml:"tenant_quota_bytes"`
	// TTL is how long a stored object can be fetched; gateways download
	// re-hosts on receipt. Default 1h.
	TTL time.Duration `yaml:"ttl"`
	// UploadTimeout bounds reading one upload's body (POST /relay/media),
	// where it replaces http.body_timeout, and the time a download (GET
	// /relay/media/{id}) may make no progress; past its first
	// upload_timeout a download must also average 16 KiB/s (fixed; each
	// download, however many run at once), so a 25 MiB one has at most
	// upload_timeout plus about 27 minutes. Default 2m.
	UploadTimeout time.Duration `yaml:"upload_timeout"`
	// AllowPrivateURLs lets send_media download a source_url that resolves
	// to a loopback, private or link-local address. Off by default: a
	// gateway must not reach the connector's own network through it.
	AllowPrivateURLs bool `yaml:"allow_private_urls"`
	// Clock is the time source of expiry; nil is clock.System.
	Clock clock.Clock `yaml:"-"`
}

// WithDefaults returns c with every zero bound at its default.
func (c Config) WithDefaults() Config {
	c.MaxBytes = cmp.Or(max(c.MaxBytes, 0), DefaultMaxBytes)
	c.QuotaBytes = cmp.Or(max(c.QuotaBytes, 0), DefaultQuotaBytes)
	c.TenantQuotaBytes = cmp.Or(max(c.TenantQuotaBytes, 0), min(DefaultTenantQuotaBytes, c.QuotaBytes))
	c.TTL = cmp.Or(max(c.TTL, 0), DefaultTTL)
	c.UploadTimeout = cmp.Or(max(c.UploadTimeout, 0), DefaultUploadTimeout)
	c.Clock = cmp.Or(c.Clock, clock.System)
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	return c
}

// Validate checks what the zero values do not cover: MaxBytes (or its
// default) is within both quotas (or theirs), else every upload between
// the two would be refused as over quota; PublicURL is an http(s) base
// URL without query, its port (if written) 1 to 65535.
func (c Config) Validate() error {
	d := c.WithDefaults()
	for _, q := range []struct {
		key   string
		quota int64
	}{{"quota_bytes", d.QuotaBytes}, {"tenant_quota_bytes", d.TenantQuotaBytes}} {
		if d.MaxBytes > q.quota {
			return fmt.Errorf("media.max_bytes (%d) exceeds media.%s (%d): an upload between the two could never be stored; lower max_bytes or raise %s", d.MaxBytes, q.key, q.quota, q.key)
		}
	}
	if c.PublicURL == "" {
		return nil
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("media.public_url: must be an http:// or https:// base URL without query")
	}
	if _, ok := origin(u); !ok || strings.HasSuffix(u.Host, ":") {
		return errors.New("media.public_url: the port must be 1 to 65535")
	}
	return nil
}

// Info describes a stored object.
type Info struct {
	ID       string
	Tenant   string
	MIME     string
	Filename string
	Size     int64
	Expires  time.Time
}

// Store is the media store. Its methods are safe for concurrent use.
type Store struct {
	cfg  Config
	lock *os.File // the directory, locked while the store is open (lockDir)

	mu       sync.Mutex
	objects  map[string]*object
	used     int64
	byTenant map[string]int64
	count    map[string]int // objects per tenant
	fetcher  *http.Client   // downloads public URLs (newFetcher)
	// created is each tenant's creation time as SetTenants last gave it.
	created map[string]time.Time
	// orphans counts the objects marked orphan: SetTenants walks the
	// objects only for them or a change of created, not at every registry
	// apply, which a tenant's changes make every instance run.
	orphans int
	// refused counts the writes refused with ErrQuota.
	refused uint64
	// due is at or before the earliest time an object expires or an
	// upload is abandoned (zero: none held), but no sooner than sweepGap
	// after the last walk, so sweepLocked walks the objects only once one
	// may go: a tenant at its quota sweeps at every refused write, and
	// would hold mu through a walk of every tenant's objects per request,
	// stalling the others' media.
	due time.Time

	// maxTenantObjects and maxObjects are the constants (tests lower them).
	maxTenantObjects, maxObjects int
}

// object is one stored or in-progress object; size counts the bytes
// reserved so far.
type object struct {
	Info
	path      string
	committed bool
	began     time.Time // when an in-progress object was begun
	file      *os.File  // an in-progress object's, closed when it is abandoned
	orphan    bool      // begun for a tenant SetTenants did not list (one gone)
}

// New creates the store's directory, locks it (refusing one another store
// holds), removes what a previous process left in it, and returns the
// store.
func New(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("media: no directory")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("media: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), fileSuffix) {
			_ = os.Remove(filepath.Join(cfg.Dir, e.Name()))
		}
	}
	return &Store{cfg: cfg, lock: lock, objects: make(map[string]*object), byTenant: make(map[string]int64), count: make(map[string]int),
		fetcher: newFetcher(cfg.AllowPrivateURLs), maxTenantObjects: maxTenantObjects, maxObjects: maxObjects}, nil
}

// lockDir takes an exclusive lock on dir (flock on the directory itself,
// so no file is added), held until the returned file is closed or the
// process ends, even by SIGKILL. It fails when another store holds it:
// one in another process (two instances on one host given the same data
// directory or media.dir) or, as flock locks belong to open files, an
// unclosed one in this process.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("media: %s is in use by another connector: each instance needs its own media directory (media.dir, or its own data directory)", dir)
		}
		return nil, fmt.Errorf("media: lock %s: %w", dir, err)
	}
	return f, nil
}

// Close releases the store's directory, for a store started there later
// (a restart within the process); the store is not used after it. The
// lock also ends with the process.
func (s *Store) Close() { _ = s.lock.Close() }

// fileSuffix marks the store's files, so New removes only those.
const fileSuffix = ".media"

// MaxBytes is the largest object the store takes.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

// URL is the re-host URL of id ("" without Config.PublicURL).
func (s *Store) URL(id string) string {
	if s.cfg.PublicURL == "" {
		return ""
	}
	return s.cfg.PublicURL + routePrefix + id
}

// ValidID reports whether id has the form of a media id (32 lowercase hex
// characters).
func ValidID(id string) bool {
	return len(id) == 32 && strings.Trim(id, "0123456789abcdef") == ""
}

// Upload is an object being written. Write streams bytes to its file;
// Commit makes it fetchable, Abort discards it. It is safe for concurrent
// use (an abort may come from another goroutine than the writes).
type Upload struct {
	s   *Store
	obj *object

	mu   sync.Mutex
	f    *os.File
	err  error // the first failure; later writes return it
	done bool
}

// Begin starts an object of tenant, or refuses with ErrQuota past the
// object counts, creating no file. Its size is reserved against the
// quotas as bytes are written.
func (s *Store) Begin(tenant, mimeType, filename string) (*Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.roomFor(tenant) {
		s.sweepLocked()
		if !s.roomFor(tenant) {
			s.refused++
			return nil, ErrQuota
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	path := filepath.Join(s.cfg.Dir, id+fileSuffix)
	// Created under mu, as removeLocked unlinks and Open opens.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("media: create object: %w", err)
	}
	obj := &object{Info: Info{ID: id, Tenant: tenant, MIME: mimeType, Filename: cleanFilename(filename)}, path: path, file: f}
	obj.began = s.cfg.Clock.Now()
	s.dueBy(obj.began.Add(s.abandonAfter()))
	if s.created != nil {
		_, listed := s.created[tenant]
		if obj.orphan = !listed; obj.orphan {
			s.orphans++
		}
	}
	s.objects[id] = obj
	s.count[tenant]++
	return &Upload{s: s, obj: obj, f: f}, nil
}

// Write appends p, refusing with ErrTooLarge or ErrQuota when it does not
// fit; after a failure every Write returns it.
func (u *Upload) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return 0, u.err
	}
	if u.done {
		return 0, errors.New("media: write after the upload ended")
	}
	if err := u.s.reserve(u.obj, int64(len(p))); err != nil {
		u.err = err
		return 0, err
	}
	n, err := u.f.Write(p)
	if err != nil {
		u.err = fmt.Errorf("media: write object: %w", err)
		return n, u.err
	}
	return n, nil
}

// Commit closes the file and makes the object fetchable until its expiry.
func (u *Upload) Commit() (Info, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return Info{}, errors.New("media: upload already ended")
	}
	u.done = true
	err := u.err
	if cerr := u.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("media: close object: %w", cerr)
	}
	if err != nil {
		u.s.remove(u.obj.ID)
		return Info{}, err
	}
	s := u.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects[u.obj.ID] != u.obj {
		return Info{}, errAbandoned
	}
	u.obj.committed, u.obj.file = true, nil
	u.obj.Expires = s.cfg.Clock.Now().Add(s.cfg.TTL)
	s.dueBy(u.obj.Expires)
	return u.obj.Info, nil
}

// Abort discards the object; after Commit it does nothing.
func (u *Upload) Abort() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	u.done = true
	_ = u.f.Close()
	u.s.remove(u.obj.ID)
}

// Put stores what r yields (at most MaxBytes) as an object of tenant.
func (s *Store) Put(tenant string, r io.Reader, mimeType, filename string) (Info, error) {
	u, err := s.Begin(tenant, mimeType, filename)
	if err != nil {
		return Info{}, err
	}
	bp := bufPool.Get().(*[]byte)
	src := &onlyReader{Reader: r}
	_, err = io.CopyBuffer(onlyWriter{u}, src, *bp)
	bufPool.Put(bp)
	if err != nil {
		u.Abort()
		if src.err != nil {
			return Info{}, fmt.Errorf("%w: %w", errRead, err)
		}
		return Info{}, err // the store's: a limit, or a write that failed
	}
	return u.Commit()
}

// errRead wraps Put's failures to read r (the caller's source), as
// opposed to the store's own (a limit, or the disk).
var errRead = errors.New("media: read object")

// bufPool holds the 64 KiB buffers objects are copied through.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// onlyWriter and onlyReader hide ReadFrom/WriteTo so io.CopyBuffer uses the
// pooled buffer and every write goes through Upload.Write's checks.
// onlyReader also keeps the reader's failure, so Put tells it from the
// store's.
type onlyWriter struct{ io.Writer }
type onlyReader struct {
	io.Reader
	err error
}

func (r *onlyReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// reserve counts n more bytes of obj against the limits. Expired objects
// are removed first when the quota would be exceeded.
func (s *Store) reserve(obj *object, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects[obj.ID] != obj {
		return errAbandoned
	}
	if obj.Size+n > s.cfg.MaxBytes {
		return ErrTooLarge
	}
	if !s.fits(obj.Tenant, n) {
		s.sweepLocked()
		if !s.fits(obj.Tenant, n) {
			s.refused++
			return ErrQuota
		}
	}
	obj.Size += n
	s.used += n
	s.byTenant[obj.Tenant] += n
	return nil
}

// roomFor reports whether tenant may begin one more object. Called with
// mu held.
func (s *Store) roomFor(tenant string) bool {
	return len(s.objects) < s.maxObjects && s.count[tenant] < s.maxTenantObjects
}

func (s *Store) fits(tenant string, n int64) bool {
	return s.used+n <= s.cfg.QuotaBytes && s.byTenant[tenant]+n <= s.cfg.TenantQuotaBytes
}

// errAbandoned fails the writes and the commit of an upload the sweep
// removed as abandoned.
var errAbandoned = errors.New("media: upload abandoned: not ended in time")

// sweepLocked removes every expired object and abandoned upload. Called
// with mu held.
func (s *Store) sweepLocked() {
	now := s.cfg.Clock.Now()
	if s.due.IsZero() || now.Before(s.due) {
		return
	}
	s.due = time.Time{}
	for id, obj := range s.objects {
		at := obj.Expires
		if !obj.committed {
			at = obj.began.Add(s.abandonAfter())
		}
		switch {
		case !now.Before(at):
			if !obj.committed {
				_ = obj.file.Close() // the upload's own Write or Commit then fails
			}
			s.removeLocked(id)
		default:
			s.dueBy(at)
		}
	}
	if next := now.Add(sweepGap); !s.due.IsZero() && s.due.Before(next) {
		s.due = next
	}
}

// sweepGap is the least time between two walks of sweepLocked. Objects
// stored one after another expire one after another: under a flood of
// refused writes each expiry would walk every object. An object then
// counts against the quotas up to sweepGap past its expiry (it is no
// longer served: Open).
const sweepGap = time.Second

// dueBy has sweepLocked walk the objects by at. Called with mu held.
func (s *Store) dueBy(at time.Time) {
	if s.due.IsZero() || at.Before(s.due) {
		s.due = at
	}
}

// abandonAfter is how long after it began an upload not ended is
// abandoned.
func (s *Store) abandonAfter() time.Duration { return max(s.cfg.TTL, s.cfg.UploadTimeout) }

// Sweep removes every expired object and abandoned upload (serve calls it periodically; writes
// call it when the quota is reached).
func (s *Store) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
}

func (s *Store) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(id)
}

// removeLocked forgets id, releases its bytes and unlinks its file (a
// reader holding it open keeps reading). Called with mu held.
func (s *Store) removeLocked(id string) {
	obj, ok := s.objects[id]
	if !ok {
		return
	}
	delete(s.objects, id)
	if obj.orphan {
		s.orphans--
	}
	s.used -= obj.Size
	if s.byTenant[obj.Tenant] -= obj.Size; s.byTenant[obj.Tenant] <= 0 {
		delete(s.byTenant, obj.Tenant)
	}
	if s.count[obj.Tenant]--; s.count[obj.Tenant] == 0 {
		delete(s.count, obj.Tenant)
	}
	_ = os.Remove(obj.path)
}

// SetTenants implements platform.TenantKeeper: it removes the objects,
// stored and in progress, of every stored tenant (one with a creation
// time) deleted or made again under its id (another creation time) since
// the last call, so they do not wait for their expiry and a tenant made
// again never fetches the earlier one's. A declared tenant (zero
// creation time: one the YAML declares now is the same tenant) dropped
// from the YAML keeps its objects until they expire, as the relay keeps
// its buffered inbound, which may name them. An object begun for a
// tenant the last call did not list (an upload let in just before its
// deletion was applied) is removed too, unless this call lists the tenant
// as created before the object was begun, or declared: then the upload
// came before this store's apply of a new tenant, which the relay had
// applied first.
func (s *Store) SetTenants(created map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.orphans == 0 && s.created != nil && maps.Equal(created, s.created) {
		return
	}
	for id, obj := range s.objects {
		was := s.created[obj.Tenant]
		now, ok := created[obj.Tenant]
		if obj.orphan && ok && !now.After(obj.began) {
			obj.orphan = false
			s.orphans--
			continue
		}
		if obj.orphan || !was.IsZero() && (!ok || !now.IsZero() && !now.Equal(was)) {
			if !obj.committed {
				_ = obj.file.Close() // the upload's own Write or Commit then fails
			}
			s.removeLocked(id)
		}
	}
	s.created = maps.Clone(created)
}

// Stats is what the store holds, for its metrics.
type Stats struct {
	// Bytes are those of every object, stored or in progress; QuotaBytes
	// bounds them (Config.QuotaBytes).
	Bytes, QuotaBytes int64
	// Objects counts the objects, stored or in progress.
	Objects int
	// QuotaRefusals counts the writes refused with ErrQuota (an upload
	// answered 507, an attachment not re-hosted, a source_url not
	// downloaded).
	QuotaRefusals uint64
}

// Stats reports what the store holds.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Bytes: s.used, QuotaBytes: s.cfg.QuotaBytes, Objects: len(s.objects), QuotaRefusals: s.refused}
}

// Object is an open stored object. Section returns a fresh reader of its
// bytes each time (for a request that is retried); Close releases it.
type Object struct {
	Info
	f       *os.File
	cleanup func()
}

// Section returns a reader of the whole object, independent of others.
func (o *Object) Section() *io.SectionReader { return io.NewSectionReader(o.f, 0, o.Size) }

// Close closes the object (and removes it when it was a temporary
// download).
func (o *Object) Close() error {
	err := o.f.Close()
	if o.cleanup != nil {
		o.cleanup()
	}
	return err
}

// Open opens tenant's object id. An unknown id, an expired object and
// another tenant's object all give ErrNotFound.
func (s *Store) Open(tenant, id string) (*Object, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	s.mu.Lock()
	obj, ok := s.objects[id]
	if ok && obj.committed && !s.cfg.Clock.Now().Before(obj.Expires) {
		s.removeLocked(id)
		ok = false
	}
	if !ok || !obj.committed || obj.Tenant != tenant {
		s.mu.Unlock()
		return nil, ErrNotFound
	}
	info, path := obj.Info, obj.path
	// Opened under mu: a removal waits, so the file is still there.
	f, err := os.Open(path)
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("media: open object: %w", err)
	}
	return &Object{Info: info, f: f}, nil
}

// cleanFilename keeps a filename's base name without control characters
// or quotes, at most 255 bytes.
func cleanFilename(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == "/" {
		return ""
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' {
			return -1
		}
		return r
	}, name)
	return strings.ToValidUTF8(name[:min(len(name), 255)], "")
}
