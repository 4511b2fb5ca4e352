package discord

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"connector/descriptor"
	"connector/internal/clock"
	"connector/platform"
	"connector/platform/fairshare"
	"connector/session"
	"connector/vault"
)

// Intents is what the connector identifies with: GUILDS (channel and thread
// events for the cache), GUILD_MESSAGES, DIRECT_MESSAGES and the privileged
// MESSAGE_CONTENT (37377).
const Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages |
	discordgo.IntentsDirectMessages | discordgo.IntentMessageContent

// Platform is the shared Discord bot. Create it with New, serve its Routes,
// and call Run once.
type Platform struct {
	deps    platform.Deps // for RunExclusive
	cfg     Config
	log     *slog.Logger
	clock   clock.Clock
	now     func() time.Time // clock.Now
	metrics platform.Metrics
	key     platform.KeyFunc
	vault   vault.Store

	pubKey   ed25519.PublicKey
	sess     *discordgo.Session
	sched    *fairshare.Scheduler
	breaker  *breaker
	cache    *cache
	created  *createdThreads
	snap     snapshot
	seen     *dedupe
	gw       *gateway
	cmds     *commandSync
	ops      map[string]opHandler
	policies map[string]*policy
	fallback *policy
	botID    atomic.Pointer[string]
	status   atomic.Pointer[platform.Status]

	queues [ingestShards]chan ingestItem

	lifeMu sync.Mutex
	life   *lifecycle
	work   sync.WaitGroup // interaction processing in flight
	slots  chan struct{}  // bounds it
}

// lifecycle is what Run provides while it runs.
type lifecycle struct {
	ctx  context.Context
	sink platform.Sink
}

var (
	_ platform.Platform      = (*Platform)(nil)
	_ platform.Routes        = (*Platform)(nil)
	_ platform.HelloObserver = (*Platform)(nil)
)

// maxProcessing bounds interactions being normalized and delivered at once.
const maxProcessing = 256

// New validates cfg, applies defaults and builds the platform. It makes no
// network call; Run connects.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Vault == nil {
		return nil, errors.New("discord: deps.Vault is required (interaction tokens live there)")
	}
	cfg = cfg.withDefaults()
	pub, _ := decodePublicKey(cfg.PublicKey) // validated above
	p := &Platform{
		cfg:      cfg,
		log:      deps.Log,
		clock:    deps.Time(),
		now:      deps.Time().Now,
		metrics:  deps.M(),
		key:      deps.Key,
		vault:    deps.Vault,
		deps:     deps,
		pubKey:   ed25519.PublicKey(pub),
		policies: make(map[string]*policy, len(cfg.Tenants)),
		fallback: newPolicy(TenantConfig{}),
		slots:    make(chan struct{}, maxProcessing),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("platform", platformName)
	if p.key == nil {
		p.key = func(_ string, src *session.Source) string { return session.Key(src, session.DefaultOptions) }
	}
	weights := make(map[string]int, len(cfg.Tenants))
	for name, tc := range cfg.Tenants {
		p.policies[name] = newPolicy(tc)
		if tc.Weight > 0 {
			weights[name] = tc.Weight
		}
	}
	p.sched = fairshare.New(fairshare.Config{Rate: cfg.GlobalPerSecond, Burst: cfg.GlobalBurst, Weights: weights, Clock: p.clock})
	p.breaker = newBreaker(cfg.InvalidRequestLimit, cfg.TenantInvalidRequestLimit, p.now)
	p.cache = newCache(p)
	p.created = newCreatedThreads()
	p.seen = newDedupe(2*cfg.InteractionSkew, p.now)
	for i := range p.queues {
		p.queues[i] = make(chan ingestItem, ingestQueueDepth)
	}
	p.ops = p.handlers()
	p.cmds = newCommandSync(p)
	if err := p.newSession(); err != nil {
		return nil, err
	}
	p.setStatus(false, false, "not started")
	empty := ""
	p.botID.Store(&empty)
	return p, nil
}

// newSession configures discordgo: our transport under its REST client, our
// dialer under its Gateway, no reconnect or rate-limit sleeping of its own
// (the gateway supervisor and the transport do both), events delivered in
// order on the Gateway reader, and its package-global logging off.
func (p *Platform) newSession() error {
	s, err := discordgo.New("Bot " + p.cfg.BotToken)
	if err != nil {
		return fmt.Errorf("discord: %w", err)
	}
	tr := &transport{
		base: http.DefaultTransport, gatewayURL: p.cfg.GatewayURL, sched: p.sched,
		routes: newRouteLimiter(p.clock), breaker: p.breaker, metrics: p.metrics,
		log: p.log, now: p.now, timeout: p.cfg.RequestTimeout,
	}
	if p.cfg.APIBaseURL != "" {
		u, _ := url.Parse(p.cfg.APIBaseURL) // validated
		tr.api = u
	}
	p.gw = newGateway(p)
	s.Client = &http.Client{Transport: tr}
	s.Dialer = &websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: p.cfg.HandshakeTimeout,
		NetDialContext:   p.gw.dial,
	}
	s.LogLevel = -1 // discordgo logs through the global logger; we log ourselves
	s.StateEnabled = false
	s.SyncEvents = true
	s.ShouldReconnectOnError = false
	s.ShouldRetryOnRateLimit = false
	s.Identify.Intents = Intents
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.Event) { p.onDispatch(e.Type, e.RawData) })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) { p.gw.signalDisconnect() })
	p.sess = s
	return nil
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform; supported_ops are the keys of the
// egress handler table.
func (p *Platform) Descriptor() descriptor.Descriptor {
	return descriptor.Discord(slices.Sorted(maps.Keys(p.ops)))
}

// Status implements platform.Platform.
func (p *Platform) Status() platform.Status {
	st := *p.status.Load()
	if st.Ready && p.breaker.open() {
		st.Ready = false
		st.Detail = errBreakerOpen.Error()
	}
	return st
}

func (p *Platform) setStatus(ready, terminal bool, detail string) {
	p.status.Store(&platform.Status{Ready: ready, Terminal: terminal, Detail: detail})
}

// Routes implements platform.Routes.
func (p *Platform) Routes() map[string]http.Handler {
	return map[string]http.Handler{"POST /discord/interactions": http.HandlerFunc(p.serveInteractions)}
}

// guildTenant resolves the tenant of an event from its own guild id; an
// event without a guild is a DM and goes to DMTenant.
func (p *Platform) guildTenant(guildID string) (string, bool) {
	if guildID == "" {
		return p.cfg.DMTenant, p.cfg.DMTenant != ""
	}
	t, ok := p.cfg.Guilds[guildID]
	return t, ok && t != ""
}

func (p *Platform) policyFor(tenant string) *policy {
	if pol, ok := p.policies[tenant]; ok {
		return pol
	}
	return p.fallback
}

func (p *Platform) bot() string { return *p.botID.Load() }

// normalizer returns the live normalizer for tenant.
func (p *Platform) normalizer(tenant string) *normalizer {
	return &normalizer{look: p.cache, botID: p.bot(), pol: p.policyFor(tenant), startThread: p.startThread, created: p.created}
}

// startThread creates a thread from a message (auto-threading and anchored
// thread_create) and records it (recordThread).
func (p *Platform) startThread(ctx context.Context, channelID, messageID, name string) (string, error) {
	var th wireChannel
	err := p.rest(ctx, "POST", discordgo.EndpointChannelMessageThread(channelID, messageID),
		&discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}, &th)
	if err != nil {
		p.log.Warn("auto-thread creation failed", "channel_id", channelID, "err", describe(err).msg)
		return "", err
	}
	if th.ID == "" {
		return "", errors.New("thread answer without id")
	}
	p.recordThread(&th, channelID, name)
	return th.ID, nil
}

// running returns Run's lifecycle, or nil when Run is not running.
func (p *Platform) running() *lifecycle {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.life == nil || p.life.ctx.Err() != nil {
		return nil
	}
	return p.life
}
