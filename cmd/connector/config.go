package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connector/contract"
	"connector/enroll"
	"connector/internal/nonneg"
	"connector/media"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/platform/whatsapp"
	"connector/registry"
	"connector/relay"
	"connector/session"
	"connector/store"
)

// Config is the connector's YAML configuration file. Unknown keys are
// errors; every field's zero value means its documented default.
type Config struct {
	// Listen is the address of the public HTTP listener (/relay, webhooks,
	// nexscope, /healthz). Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// ShutdownGrace bounds how long SIGTERM waits for the platforms to stop
	// taking events (one that does not is logged) and for in-flight outbound ops.
	// Every op still running then is answered with the retryable code
	// unavailable, marked ambiguous (it may have been applied), and every
	// gateway is closed with 1001 (waiting up to relay.write_timeout + 5s
	// more for the close). A second SIGTERM or SIGINT exits at once.
	// Default 30s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// ShutdownDelay is how long SIGTERM waits, serving as usual while
	// /readyz answers 503, before the shutdown starts: long enough for a
	// load balancer's health checks to take the instance out of rotation
	// (its interval times its unhealthy threshold) before the listener
	// closes. A second SIGTERM or SIGINT exits at once. Default 0s (none:
	// right for a single instance without a load balancer).
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// Log configures structured logging.
	Log LogConfig `yaml:"log"`
	// TLS, when cert_file and key_file are set, serves https:// and wss://
	// directly instead of plain HTTP.
	TLS TLSConfig `yaml:"tls"`
	// HTTP bounds the public listener's connections and requests.
	HTTP HTTPConfig `yaml:"http"`
	// Ops is the operations listener (/metrics, /readyz, /platforms).
	Ops OpsConfig `yaml:"ops"`
	// Admin is the operator's admin API (/admin/v1/): tenants, gateways,
	// secrets and bindings changed while the connector runs
	// (docs/operations.md).
	Admin AdminConfig `yaml:"admin"`
	// Relay tunes the gateway-facing /relay server.
	Relay relay.Config `yaml:"relay"` // the keys are relay.Config's tagged fields
	// Store is where durable state lives: inbound the gateways have not
	// acknowledged (stored before a platform is told it arrived) and
	// interaction tokens, for their TTL (docs/durability.md).
	Store StoreConfig `yaml:"store"`
	// Media bounds the media store (uploads for send_media, re-hosted
	// inbound attachments) and says where gateways reach it.
	Media media.Config `yaml:"media"`
	// Enroll verifies the identity tokens of the Hermes gateway's
	// credential routes, POST /relay/enroll and POST /relay/provision,
	// and of the management plane, /manage/* (docs/operations.md).
	Enroll enroll.Config `yaml:"enroll"`
	// Tenants are the customers of the connector and their gateways.
	Tenants []TenantConfig `yaml:"tenants"`

	// Discord fronts the shared Discord bot; enabled when the section is
	// present or DISCORD_BOT_TOKEN is set. Routing: guilds (guild id ->
	// tenant) and dm_tenant. A guild id is read as the number it spells
	// ("0500" is guild 500); one guild under two spellings is an error.
	Discord *discord.Config `yaml:"discord"`
	// Telegram fronts the shared Telegram bot; enabled when the section is
	// present or TELEGRAM_BOT_TOKEN is set. Routing: chats (chat id ->
	// tenant), each id read as the number it spells ("-0100" is chat -100;
	// one chat under two spellings is an error). Long polling unless
	// webhook_url is set.
	Telegram *telegram.Config `yaml:"telegram"`
	// Slack fronts the shared Slack app; enabled when the section is present
	// or SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN or SLACK_APP_TOKEN is set.
	// Routing: teams (workspace id -> tenant), plus team and channel
	// bindings of the admin API. HTTP events at /slack/events unless
	// app_token selects Socket Mode.
	Slack *slack.Config `yaml:"slack"`
	// WhatsApp fronts one WhatsApp Cloud API app (platform whatsapp_cloud);
	// enabled when the section is present or WHATSAPP_ACCESS_TOKEN is set.
	// Routing: phone_numbers (business phone number id -> tenant). Meta
	// reaches it at GET and POST /whatsapp/webhook.
	WhatsApp *whatsapp.Config `yaml:"whatsapp"`
	// Nexscope hosts nexscope rooms at /ws and /ws/{room}; enabled when the
	// section is present or NEXSCOPE_TOKEN is set, and on embedded defaults.
	// Routing: rooms[].tenant.
	Nexscope *nexscope.Config `yaml:"nexscope"`

	// deprecations are the older key spellings the file used.
	deprecations []deprecation
	// fromEnv names the variable each key set from the environment came
	// from (applyKeyEnv).
	fromEnv map[string]string
}

// LogConfig configures log/slog output.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is text, json or auto (text on a terminal, JSON otherwise).
	// Default auto.
	Format string `yaml:"format"`
}

// TLSConfig holds the certificate for serving TLS directly.
type TLSConfig struct {
	// CertFile is a PEM certificate chain. Empty: plain HTTP.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
}

// StoreConfig selects the durable store. It is not store.Config: its
// keys are flat (redis_cluster_*), name files (redis_tls) and hold the
// instances' settings (instance, lease_ttl); storeConfig converts it.
type StoreConfig struct {
	// Backend is embedded (a bbolt file in the data directory; no
	// external service; one process at a time) or redis (Redis 6.2 or
	// later shared by several instances: one server, a primary found
	// through Sentinel, or a Redis Cluster; behind a server or proxy whose
	// `INFO replication` names no `master_replid`, seqs may repeat after a
	// failover, docs/durability.md). Default embedded; a Redis address
	// (redis_url, redis_sentinel, redis_cluster_addrs) with it is refused.
	Backend string `yaml:"backend"`
	// Path is the data directory: the embedded store's file (connector.db)
	// and the secrets embedded defaults generate. The -data-dir flag and
	// $CONNECTOR_DATA_DIR override it. Default $XDG_STATE_HOME/connector,
	// else ~/.local/state/connector.
	Path string `yaml:"path"`
	// RedisURL addresses the redis backend's one server:
	// redis://[user:password@]host:port/db (rediss:// for TLS; an ACL user
	// as user). $CONNECTOR_REDIS_URL overrides it. Set one of redis_url,
	// redis_sentinel and redis_cluster_addrs.
	RedisURL string `yaml:"redis_url"`
	// RedisSentinel finds the redis backend's primary through Sentinel and
	// follows its failovers without a restart.
	RedisSentinel *store.RedisSentinel `yaml:"redis_sentinel"`
	// RedisClusterAddrs are host:port addresses of nodes of a Redis
	// Cluster the redis backend runs on (the others are learnt from
	// them). Each tenant's keys live in one slot, so tenants spread over
	// the shards.
	RedisClusterAddrs []string `yaml:"redis_cluster_addrs"`
	// RedisClusterUsername is the ACL user for the cluster's nodes.
	// Default the default user.
	RedisClusterUsername string `yaml:"redis_cluster_username"`
	// RedisClusterPassword is the password for the cluster's nodes.
	RedisClusterPassword string `yaml:"redis_cluster_password"`
	// RedisClusterTLS connects to the cluster's nodes over TLS.
	RedisClusterTLS bool `yaml:"redis_cluster_tls"`
	// RedisTLS says how to verify the Redis servers when TLS is on
	// (rediss://, redis_sentinel.tls, redis_cluster_tls), and the client
	// certificate to present if they ask for one.
	RedisTLS RedisTLSConfig `yaml:"redis_tls"`
	// RedisMinReplicas is how many Redis replicas must have an inbound
	// event (WAIT) before it is confirmed to its platform; when they do not
	// within redis_replica_timeout the confirmation is refused and the
	// platform sends the event again. Likewise a lease (and its fencing
	// token) is taken or renewed only once that many replicas have it; if
	// they do not, the instance does not act on it (and steps down by the
	// lease_ttl rule when renewals keep failing), and a registry change
	// (Slack's durable intake, an admin change) or a claim (a nexscope
	// action's, a webhook dedupe's) counts only once that many replicas
	// have it. Default 0: confirmed once the primary has it.
	RedisMinReplicas int `yaml:"redis_min_replicas"`
	// RedisReplicaTimeout bounds the wait for redis_min_replicas; a lease's
	// wait is bounded by a quarter of lease_ttl (its renewal period) when
	// that is shorter. Default 1s.
	RedisReplicaTimeout time.Duration `yaml:"redis_replica_timeout"`
	// Instance names this instance among those sharing the redis backend
	// (in logs and leases); unique per process. $CONNECTOR_INSTANCE
	// overrides it. Default the host name and a random suffix.
	Instance string `yaml:"instance"`
	// LeaseTTL bounds a takeover when an instance dies (redis backend):
	// how long the lease on a tenant's delivery, on the Discord Gateway
	// session, on the Telegram long poll and on a nexscope room lasts
	// unless its holder renews it. The holder renews every quarter of it,
	// and stops acting as the owner an eighth of it before the lease
	// expires unrenewed; another instance takes the lease at its expiry. A
	// third of it is the instances' beat, and an instance silent for the
	// whole of it is gone. Default 2s; at least 100ms.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// EnvRedisURL overrides store.redis_url.
const EnvRedisURL = "CONNECTOR_REDIS_URL"

// RedisTLSConfig verifies the Redis servers and identifies the connector
// to them.
type RedisTLSConfig struct {
	// CAFile is a PEM bundle of the CAs that signed the servers'
	// certificates. Default the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is a PEM client certificate chain, for servers that ask for
	// one (tls-auth-clients).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
}

// TenantConfig is one tenant.
type TenantConfig struct {
	// ID names the tenant in platform routing (which guilds, chats and rooms
	// it owns) and in logs and metrics. It is 1 to 64 of A-Z a-z 0-9 . _ -,
	// starting with a letter or digit (the admin API's rule: ids are parts
	// of store keys); another id is an error.
	ID string `yaml:"id"`
	// Gateways are the gateway identities that connect for this tenant.
	Gateways []GatewayConfig `yaml:"gateways"`
	// MaxGateways bounds the tenant's gateways, these and those made by the
	// admin API, enrollment and self-provision together: one more is
	// refused (429). Default 100, at most 10000.
	MaxGateways int `yaml:"max_gateways"`
	// Session holds the knobs of the tenant's gateways that change session
	// keys; they must match the gateways' config.yaml and installed
	// platform plugins. Defaults are the stock gateway's:
	// group_sessions_per_user true, thread_sessions_per_user false, no
	// profile, nexscope rooms keyed as relay.
	Session registry.Session `yaml:"session"`
}

// GatewayConfig is one gateway identity.
type GatewayConfig struct {
	// ID is the gateway's GATEWAY_RELAY_ID, under the tenant id's rule. Two
	// ids that name the same CONNECTOR_GATEWAY_SECRETS_<ID> variable (gw-a
	// and gw.a) are an error: they would share its secrets.
	ID string `yaml:"id"`
	// Secrets are accepted GATEWAY_RELAY_SECRET values, several while one is
	// rotated, at most 8 with the environment's. More come from the
	// environment variable CONNECTOR_GATEWAY_SECRETS_<ID> (comma-separated;
	// the id upper-cased, every character outside A-Z and 0-9 replaced by
	// "_").
	Secrets []string `yaml:"secrets"`
}

const defaultListen = "127.0.0.1:8080"

// readConfig reads the YAML config file path, or starts from base when
// path is "" (embedded defaults; serve and health share the rule), and
// applies the environment (applyKeyEnv). Unknown keys and invalid values
// are errors that name the key, and the file (inFile).
func readConfig(path string, base *Config, lookup func(string) (string, bool)) (*Config, error) {
	cfg := base
	if path != "" {
		data, err := os.ReadFile(path)
		if err == nil {
			cfg, err = ParseConfig(data)
		}
		if err != nil {
			return nil, inFile(path, err)
		}
	}
	if err := cfg.applyKeyEnv(lookup); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseConfig decodes a YAML config document strictly: an unknown key is an
// error. Older spellings of keys are read as the current ones and listed
// in the result's deprecations.
func ParseConfig(data []byte) (*Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	if c.deprecations, err = migrateKeys(root); err != nil {
		return nil, err
	}
	if err := decodeNode(root, &c, "", true); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

// applyGatewaySecrets adds each gateway's secrets from its
// CONNECTOR_GATEWAY_SECRETS_<ID> variable (lookup is os.LookupEnv in
// production).
func (c *Config) applyGatewaySecrets(lookup func(string) (string, bool)) {
	for ti := range c.Tenants {
		for gi := range c.Tenants[ti].Gateways {
			g := &c.Tenants[ti].Gateways[gi]
			if v, ok := lookup(GatewaySecretsEnv(g.ID)); ok {
				for s := range strings.SplitSeq(v, ",") {
					if s = strings.TrimSpace(s); s != "" {
						g.Secrets = append(g.Secrets, s)
					}
				}
			}
		}
	}
}

// GatewaySecretsEnv is the environment variable holding extra secrets of
// gateway id.
func GatewaySecretsEnv(id string) string {
	b := []byte(strings.ToUpper(id))
	for i, ch := range b {
		if (ch < 'A' || ch > 'Z') && (ch < '0' || ch > '9') {
			b[i] = '_'
		}
	}
	return gatewaySecretsEnvPrefix + string(b)
}

// gatewaySecretsEnvPrefix starts GatewaySecretsEnv's variables.
const gatewaySecretsEnvPrefix = "CONNECTOR_GATEWAY_SECRETS_"

// normalize fills the defaults of the listeners and the http section and
// rewrites platform ids to the spelling the platforms send ("0500" is
// guild 500), so Validate and serve read one form.
func (c *Config) normalize() error {
	c.Listen = cmp.Or(c.Listen, defaultListen)
	c.normalizeHTTP()
	return c.normalizePlatforms()
}

// Validate reports the first invalid value, naming its key. It changes
// nothing; a zero value stands for its default.
func (c *Config) Validate() error {
	if err := cmp.Or(validListen("listen", c.Listen), nonNegative("", c)); err != nil { // nonNegative: shutdown_grace, shutdown_delay
		return err
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("config: log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "auto", "text", "json":
	default:
		return fmt.Errorf("config: log.format: %q is not one of auto, text, json", c.Log.Format)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("config: tls: cert_file and key_file must be set together")
	}
	// The first failing section, in this order, is reported.
	return cmp.Or(c.validateHTTP(), c.Admin.validate(), c.distinctListeners(), nonNegative("media", &c.Media), valid(c.Media), nonNegative("relay", &c.Relay),
		nonNegative("enroll", &c.Enroll), c.Store.validate(), c.validateTenants(), c.validatePlatforms())
}

// distinctListeners refuses two listeners (listen, ops.listen,
// admin.listen) on one port of one address, or of every address and any
// of them: the second could not bind, and serve would stop saying another
// process holds the port. Port 0 (any free port) never clashes.
func (c *Config) distinctListeners() error {
	keys := []string{"listen", "ops.listen", "admin.listen"}
	addrs := []string{c.Listen, c.Ops.Listen, c.Admin.Listen}
	for i := range addrs {
		for j := range i {
			if sameListener(addrs[i], addrs[j]) {
				return fmt.Errorf("config: %s: %q is also %s; give each listener its own port", keys[i], addrs[i], keys[j])
			}
		}
	}
	return nil
}

// sameListener reports whether listeners on a and b (host:port, checked
// by validListen) would take the same port.
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, _ := net.LookupPort("tcp", pa)
	nb, _ := net.LookupPort("tcp", pb)
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return na != 0 && na == nb && (ha == hb || wildcard(ha) || wildcard(hb))
}

// minLeaseTTL is the shortest store.lease_ttl: its holder renews every
// quarter of it and the instances beat every third, each a store round
// trip.
const minLeaseTTL = 100 * time.Millisecond

// nonNegative checks that no number of the section at key (a pointer to
// its struct; "" for the file's top level) is negative, and that no
// duration of it is set shorter than nonneg.Least: zero stands for the
// default, relay.New would read a negative one as its default too, and
// timers that short spin.
func nonNegative(key string, section any) error {
	return nonneg.Check("config: "+joinKey(key, ""), section)
}

// validListen checks addr, the value of config key key (none: nil), the
// way net.Listen("tcp", addr) reads it, short of resolving a host name.
func validListen(key, addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("config: %s: %q is not host:port", key, addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("config: %s: %q: %q is not a port", key, addr, port)
	}
	return nil
}

func (c *Config) validateTenants() error {
	tenants := map[string]bool{}
	gateways := map[string]bool{}
	secretsEnv := map[string]string{} // CONNECTOR_GATEWAY_SECRETS_<ID> -> gateway id
	for ti, t := range c.Tenants {
		key := fmt.Sprintf("tenants[%d]", ti)
		if t.ID == "" {
			return fmt.Errorf("config: %s.id: required", key)
		}
		if err := registry.CheckID("tenant", t.ID); err != nil {
			return fmt.Errorf("config: %s.id: %w", key, err)
		}
		if tenants[t.ID] {
			return fmt.Errorf("config: %s.id: tenant %q is defined twice", key, t.ID)
		}
		tenants[t.ID] = true
		if t.MaxGateways < 0 || t.MaxGateways > registry.GatewayLimitCeiling {
			return fmt.Errorf("config: %s.max_gateways: %d: want 0 (the default, %d) to %d", key, t.MaxGateways, registry.DefaultMaxGateways, registry.GatewayLimitCeiling)
		}
		switch p := t.Session.NexscopeKeyPlatform; p {
		case "", session.PlatformRelay, session.PlatformNexscope:
		default:
			return fmt.Errorf("config: %s.session.nexscope_key_platform: %q is not one of %s, %s",
				key, p, session.PlatformRelay, session.PlatformNexscope)
		}
		for gi, g := range t.Gateways {
			gkey := fmt.Sprintf("%s.gateways[%d]", key, gi)
			if g.ID == "" {
				return fmt.Errorf("config: %s.id: required", gkey)
			}
			if err := registry.CheckID("gateway", g.ID); err != nil {
				return fmt.Errorf("config: %s.id: %w", gkey, err)
			}
			if gateways[g.ID] {
				return fmt.Errorf("config: %s.id: gateway %q is defined twice", gkey, g.ID)
			}
			gateways[g.ID] = true
			// Two ids sharing a variable would share its secrets, across
			// tenants too.
			env := GatewaySecretsEnv(g.ID)
			if other, taken := secretsEnv[env]; taken {
				return fmt.Errorf("config: %s.id: gateways %q and %q would both read their secrets from %s; rename one", gkey, other, g.ID, env)
			}
			secretsEnv[env] = g.ID
			if len(g.Secrets) == 0 {
				return fmt.Errorf("config: %s.secrets: at least one secret is required (or set %s)", gkey, GatewaySecretsEnv(g.ID))
			}
			if _, err := contract.NewTokenKeys(g.Secrets); err != nil { // the relay's rule: 1 to 8, none empty
				return fmt.Errorf("config: %s.secrets: %w", gkey, err)
			}
		}
	}
	return nil
}

// TenantIDs returns the configured tenant ids.
func (c *Config) TenantIDs() map[string]bool {
	ids := make(map[string]bool, len(c.Tenants))
	for _, t := range c.Tenants {
		ids[t.ID] = true
	}
	return ids
}

// validate checks the store section.
func (s *StoreConfig) validate() error {
	if s.LeaseTTL > 0 && s.LeaseTTL < minLeaseTTL { // before the general 1 ms: the message names this key's minimum
		return fmt.Errorf("config: store.lease_ttl: %v is shorter than %v; leave it unset for the default", s.LeaseTTL, minLeaseTTL)
	}
	if err := nonNegative("store", s); err != nil { // lease_ttl and the redis_* numbers
		return err
	}
	switch s.Backend {
	case "", store.BackendEmbedded:
		return s.noRedisAddress()
	case store.BackendRedis:
		return s.validateRedis()
	default:
		return fmt.Errorf("config: store.backend: %q is not one of embedded, redis", s.Backend)
	}
}

// noRedisAddress refuses a Redis address on the embedded backend: an
// instance meant to share that Redis would run on its own store instead.
func (s *StoreConfig) noRedisAddress() error {
	key := ""
	switch {
	case s.RedisURL != "":
		key = "redis_url (or $" + EnvRedisURL + ")"
	case s.RedisSentinel != nil:
		key = "redis_sentinel"
	case len(s.RedisClusterAddrs) > 0:
		key = "redis_cluster_addrs"
	default:
		return nil
	}
	return fmt.Errorf("config: store.%s is set but store.backend is embedded (the default), which would not use Redis: set store.backend: redis, or remove it", key)
}

// validateRedis checks the redis backend's keys: exactly one way to reach
// it, each complete (store.CheckRedis owns the rules store.Open applies).
func (s *StoreConfig) validateRedis() error {
	switch {
	case s.RedisURL == "" && s.RedisSentinel == nil && len(s.RedisClusterAddrs) == 0:
		return fmt.Errorf("config: store.redis_url: required for the redis backend (or set %s), unless store.redis_sentinel or store.redis_cluster_addrs is set", EnvRedisURL)
	case len(s.RedisClusterAddrs) == 0 && (s.RedisClusterUsername != "" || s.RedisClusterPassword != "" || s.RedisClusterTLS):
		return errors.New("config: store.redis_cluster_*: set with redis_cluster_addrs only")
	case (s.RedisTLS.CertFile == "") != (s.RedisTLS.KeyFile == ""):
		return errors.New("config: store.redis_tls: cert_file and key_file must be set together")
	}
	cfg, err := s.storeConfig()
	if err != nil {
		return err
	}
	if err := store.CheckRedis(cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// storeConfig is the store section for store.Open, with store.redis_tls's
// files read.
func (s *StoreConfig) storeConfig() (store.Config, error) {
	cfg := store.Config{
		Backend: s.Backend, Path: s.Path, RedisURL: s.RedisURL,
		RedisMinReplicas: s.RedisMinReplicas, RedisReplicaTimeout: s.RedisReplicaTimeout,
	}
	if s.Backend != store.BackendRedis {
		return cfg, nil
	}
	cfg.RedisSentinel = s.RedisSentinel
	if len(s.RedisClusterAddrs) > 0 {
		cfg.RedisCluster = &store.RedisCluster{
			Addrs: s.RedisClusterAddrs, Username: s.RedisClusterUsername, Password: s.RedisClusterPassword, TLS: s.RedisClusterTLS,
		}
	}
	var err error
	cfg.RedisTLS, err = s.RedisTLS.load()
	return cfg, err
}

// load reads the files of the redis_tls section; nil when none is set.
func (c RedisTLSConfig) load() (*tls.Config, error) {
	if c == (RedisTLSConfig{}) {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: store.redis_tls.ca_file: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: store.redis_tls.ca_file: no PEM certificate in %s", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: store.redis_tls: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// describe says where the store keeps its data, for the banner and logs:
// never the Redis password.
func (s *StoreConfig) describe() string {
	if s.Backend == store.BackendRedis {
		switch {
		case s.RedisSentinel != nil:
			return fmt.Sprintf("redis primary %q through the Sentinels at %s", s.RedisSentinel.Master, strings.Join(s.RedisSentinel.Addrs, ","))
		case len(s.RedisClusterAddrs) > 0:
			return "redis cluster at " + strings.Join(s.RedisClusterAddrs, ",")
		}
		where := "redis"
		if u, err := url.Parse(s.RedisURL); err == nil {
			where += " at " + u.Host + u.Path
		}
		return where
	}
	return "embedded, in " + filepath.Join(s.Path, store.DataFile)
}
