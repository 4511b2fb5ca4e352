package discord

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"connector/descriptor"
	"connector/internal/clock"
	"connector/internal/loglimit"
	"connector/internal/ttlcache"
	"connector/platform"
	"connector/platform/chatcontext"
	"connector/platform/chatorder"
	"connector/platform/fairshare"
	"connector/store"
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
	metrics platform.Metrics
	key     platform.KeyFunc
	vault   vault.Store
	egress  platform.Egress[*Platform, string]
	// guilds maps a guild id to its tenant: Config.Guilds until Bind
	// replaces it. Command sync and the guild snapshot read it; who a
	// chat belongs to is owners'.
	guilds atomic.Pointer[map[string]string]
	// owners is the chat ownership (authors.go): the guild bindings,
	// scope claims, links and principals; replaced with guilds by Bind.
	owners atomic.Pointer[platform.Ownership]
	// spoke remembers the channels where a message routed by author
	// reached its tenant: that tenant may act there (authors.go).
	spoke *platform.Grants
	// links redeems "/link <code>" DMs off the ingest workers.
	links *platform.LinkDesk
	// dropLogs holds the lines of events no tenant takes to one per guild
	// (or DM) a minute (routeDropped): anyone can post in a guild the bot
	// is in, or DM it.
	dropLogs *loglimit.Limiter

	pubKey  ed25519.PublicKey
	sess    *discordgo.Session
	sched   *fairshare.Scheduler
	breaker *breaker
	cache   *cache
	created *createdThreads
	// channelContext holds held-back guild messages (channelctx.go).
	channelContext *chatcontext.Log[string]
	snap           snapshot
	// gwHere is set while the Gateway session runs on this instance (with
	// several instances, while it holds the lease ingest/discord/gateway).
	gwHere atomic.Bool
	// declined is what an instance without the Gateway remembers of its
	// chat-owner lookups (standby.go): (asking tenant, chat) pairs
	// declined lately, each with the count of Binds (ownersGen) it was
	// declined under.
	declined *ttlcache.Cache[[2]string, uint64]
	// ownersGen counts the Binds, each after it stored owners: a decline
	// holds under the count read before its decision only (standby.go),
	// with no ownership kept alive for it.
	ownersGen atomic.Uint64
	// owned are the (asking tenant, chat) pairs a standby's lookup found
	// to be the asker's lately, with the chat (standby.go).
	owned *ttlcache.Cache[[2]string, chanInfo]
	// seen claims interaction ids for seenFor (platform.ClaimsFor: in the
	// store with several instances, so a replay to another instance is
	// refused too): a replay older than that fails the freshness check
	// anyway.
	seen store.Claims
	gw   *gateway
	cmds *commandSync
	// policies are the tenants' policies, from Config.Tenants and the
	// relevance their gateways declared (SetRelevance).
	policies atomic.Pointer[map[string]*policy]
	fallback *policy
	botID    atomic.Pointer[string]
	status   atomic.Pointer[platform.Status]

	// turns ingests each channel's messages in Gateway order, and
	// different channels side by side.
	turns *chatorder.Queue[string]

	lifeMu    sync.Mutex
	life      *lifecycle
	work      sync.WaitGroup // entered work in flight (enter): interactions, messages being queued
	slots     chan struct{}  // bounds processing
	admitting chan struct{}  // bounds Gateway interactions being admitted
}

// lifecycle is what Run provides while it runs.
type lifecycle struct {
	ctx  context.Context
	sink platform.Sink
}

var (
	_ platform.Platform       = (*Platform)(nil)
	_ platform.Routes         = (*Platform)(nil)
	_ platform.HelloObserver  = (*Platform)(nil)
	_ platform.Binder         = (*Platform)(nil)
	_ platform.RelevanceTaker = (*Platform)(nil)
	_ platform.ChatGranter    = (*Platform)(nil)
	_ platform.ScopeLocator   = (*Platform)(nil)
	_ platform.TenantKeeper   = (*Platform)(nil)
)

// maxProcessing bounds interactions being normalized and delivered at once.
const maxProcessing = 256

// maxAdmitting bounds Gateway interactions being admitted at once (claimed,
// routed, waiting for a slot; gatewayInteraction).
const maxAdmitting = 256

// maxSeenInteractions bounds the interaction ids remembered (interactions
// arrive at human rates; this only matters under a flood of valid
// signatures).
const maxSeenInteractions = 1 << 20

// New validates cfg, applies defaults and builds the platform. It makes no
// network call; Run connects.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Vault == nil {
		return nil, errors.New("discord: deps.Vault is required (interaction tokens live there)")
	}
	cfg = cfg.WithDefaults()
	deps = deps.WithDefaults()
	pub, _ := decodePublicKey(cfg.PublicKey) // validated above
	p := &Platform{
		cfg:       cfg,
		log:       deps.Log.With("platform", platformName),
		clock:     deps.Clock,
		metrics:   deps.Metrics,
		key:       deps.Key,
		vault:     deps.Vault,
		deps:      deps,
		pubKey:    ed25519.PublicKey(pub),
		fallback:  newPolicy(TenantConfig{}),
		slots:     make(chan struct{}, maxProcessing),
		admitting: make(chan struct{}, maxAdmitting),
	}
	guilds := maps.Clone(cfg.Guilds)
	p.guilds.Store(&guilds)
	p.owners.Store(platform.NewOwnership(guildBindings(guilds)))
	p.spoke = platform.NewGrants(platformName, deps.Vault, p.clock, p.log)
	p.egress = platform.Egress[*Platform, string]{Ops: ops, Chat: channelOf, Timeout: cfg.RequestTimeout, Grants: p.spoke, Vault: deps.Vault, ThreadChats: true, Clock: p.clock}
	p.links = platform.NewLinkDesk(p.clock)
	p.dropLogs = loglimit.NewLimiter(dropLogRate, allDropsLogRate, maxDropLogKeys, p.clock)
	p.SetRelevance(nil)
	weights := fairshare.WeightsOf(cfg.Tenants, func(tc TenantConfig) int { return tc.Weight })
	p.sched = fairshare.New(fairshare.Config{Rate: cfg.GlobalPerSecond, Burst: cfg.GlobalBurst, Weights: weights, Clock: p.clock})
	p.breaker = newBreaker(cfg.InvalidRequestLimit, cfg.TenantInvalidRequestLimit, p.clock)
	p.cache = newCache(p)
	p.declined = ttlcache.New[[2]string, uint64](maxStandbyDeclines, standbyDeclineTTL, p.clock)
	p.owned = ttlcache.New[[2]string, chanInfo](maxStandbyDeclines, standbyOwnTTL, p.clock)
	p.created = newCreatedThreads()
	p.channelContext = chatcontext.New[string](chatcontext.Bounds{Weights: weights})
	p.seen = platform.ClaimsFor(deps, maxSeenInteractions, p.clock)
	p.turns = chatorder.New[string](maxIngesting)
	p.cmds = newCommandSync(p)
	p.newSession()
	p.setStatus(false, false, "not started")
	empty := ""
	p.botID.Store(&empty)
	return p, nil
}

// newSession configures discordgo for REST: our transport under its
// client, no rate-limit sleeping of its own (the transport does it). The
// Gateway runs on sessions of its own (gatewaySession).
func (p *Platform) newSession() {
	p.gw = newGateway(p)
	tr := &transport{
		base: http.DefaultTransport, gatewayURL: p.cfg.GatewayURL, gatewayCtx: p.gw.openContext, sched: p.sched,
		routes: newRouteLimiter(p.clock), breaker: p.breaker, metrics: p.metrics,
		log: p.log, clock: p.clock, timeout: p.cfg.RequestTimeout,
	}
	if p.cfg.APIBaseURL != "" {
		u, _ := url.Parse(p.cfg.APIBaseURL) // validated
		tr.api = u
	}
	p.sess = p.discordSession(&http.Client{Transport: tr})
}

// discordSession is a discordgo session on client with its package-global
// logging off.
func (p *Platform) discordSession(client *http.Client) *discordgo.Session {
	s, _ := discordgo.New("Bot " + p.cfg.BotToken) // never fails
	s.Client = client
	s.LogLevel = -1 // discordgo logs through the global logger; we log ourselves
	s.ShouldRetryOnRateLimit = false
	s.MaxRestRetries = 0 // a 502 may answer a message Discord posted: never sent again
	return s
}

// gatewaySession is a new Gateway session, whose first open IDENTIFYs:
// discordgo keeps its session id and sequence for good and RESUMEs with them
// on every later open. It has our dialer under its Gateway, no reconnect of
// its own (the gateway supervisor does it) and events delivered in order on
// the Gateway reader.
func (p *Platform) gatewaySession() *discordgo.Session {
	s := p.discordSession(p.sess.Client)
	d := &websocket.Dialer{HandshakeTimeout: p.cfg.HandshakeTimeout, NetDialContext: p.gw.dial}
	d.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return p.gw.dialTLS(ctx, network, addr, d.TLSClientConfig)
	}
	s.Dialer = d
	s.StateEnabled = false
	s.SyncEvents = true
	s.ShouldReconnectOnError = false
	s.Identify.Intents = Intents
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.Event) { p.onDispatch(e.Type, e.RawData) })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Connect) { p.gw.handshakeDone() })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) { p.gw.signalDisconnect() })
	return s
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform; supported_ops are the keys of the
// egress handler table.
func (p *Platform) Descriptor() descriptor.Descriptor {
	return descriptor.Discord(ops.Names())
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

func (p *Platform) policyFor(tenant string) *policy {
	if pol, ok := (*p.policies.Load())[tenant]; ok {
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
// thread_create), or without a starter message when messageID is "" (a
// public channel thread), and records it (recordThread).
func (p *Platform) startThread(ctx context.Context, channelID, messageID, name string) (string, error) {
	endpoint := discordgo.EndpointChannelMessageThread(channelID, messageID)
	start := &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}
	if messageID == "" {
		endpoint, start.Type = discordgo.EndpointChannelThreads(channelID), discordgo.ChannelTypeGuildPublicThread
	}
	var th wireChannel
	if err := p.rest(ctx, "POST", endpoint, start, &th); err != nil {
		p.log.Warn("thread creation failed", "channel_id", channelID, "err", describe(err).Error)
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

// enter registers work Run waits for (p.work) and returns Run's
// lifecycle, or nil, registering nothing, when Run is not running: the
// check and the registration are one step under lifeMu, so no work is
// added once stop began waiting.
func (p *Platform) enter() *lifecycle {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.life == nil || p.life.ctx.Err() != nil {
		return nil
	}
	p.work.Add(1)
	return p.life
}

// stop ends Run's lifecycle with cancel, under lifeMu so that enter admits
// nothing after it, and waits for the work entered before.
func (p *Platform) stop(cancel context.CancelFunc) {
	p.lifeMu.Lock()
	cancel()
	p.lifeMu.Unlock()
	p.work.Wait()
}

// guildOwners maps each bound guild id to its tenant.
func (p *Platform) guildOwners() map[string]string { return *p.guilds.Load() }

// guildBindings are the bindings of guilds, a guild id -> tenant map.
func guildBindings(guilds map[string]string) []platform.Binding {
	out := make([]platform.Binding, 0, len(guilds))
	for id, tenant := range guilds {
		out = append(out, platform.Binding{Kind: platform.BindGuild, ID: id, Tenant: tenant})
	}
	return out
}

// Bind implements platform.Binder: the bindings of kind guild and of the
// author kinds (platform.IsAuthorKind) replace the chat ownership
// (platform.Ownership), and the guilds the guild table; ids (and a scope
// claim's space) are read as the numbers they spell (a principal's is its
// policy). Guilds whose tenant changed get their commands synced again,
// and guilds no longer bound have theirs removed.
func (p *Platform) Bind(bindings []platform.Binding) error {
	guilds := make(map[string]string, len(bindings))
	canonical := make([]platform.Binding, 0, len(bindings))
	id := func(s string) (string, bool) {
		n, err := strconv.ParseUint(s, 10, 64)
		return strconv.FormatUint(n, 10), err == nil
	}
	for _, b := range bindings {
		if b.Kind != platform.BindGuild && !platform.IsAuthorKind(b.Kind) {
			return fmt.Errorf("discord: binding kind %q: want %s or an author kind", b.Kind, platform.BindGuild)
		}
		if b.Kind != platform.BindPrincipal {
			var ok bool
			if b.ID, ok = id(b.ID); !ok {
				return fmt.Errorf("discord: %s %q is not a Discord id", b.Kind, b.ID)
			}
		}
		if b.Space != "" {
			var ok bool
			if b.Space, ok = id(b.Space); !ok {
				return fmt.Errorf("discord: %s %q: space %q is not a Discord id", b.Kind, b.ID, b.Space)
			}
		}
		if b.Kind == platform.BindGuild {
			guilds[b.ID] = b.Tenant
		}
		canonical = append(canonical, b)
	}
	p.owners.Store(platform.NewOwnership(canonical))
	p.ownersGen.Add(1)
	old := *p.guilds.Swap(&guilds)
	for guild, tenant := range guilds {
		if old[guild] != tenant {
			p.cmds.rebound(guild)
		}
	}
	for guild := range old {
		if _, still := guilds[guild]; !still {
			p.cmds.rebound(guild) // emptied: no tenant's commands stay
		}
	}
	return nil
}

// SetRelevance implements platform.RelevanceTaker. A tenant's declared
// relevance replaces three knobs of its discord.tenants settings:
// require_mention (RequireAddress), free_response_channels
// (FreeResponseScopes) and allow_bots ("all" when AllowOtherBots, else
// "none"); its other knobs stay as configured.
func (p *Platform) SetRelevance(byTenant map[string]platform.Relevance) {
	policies := make(map[string]*policy, len(p.cfg.Tenants)+len(byTenant))
	for name, tc := range p.cfg.Tenants {
		policies[name] = newPolicy(tc)
	}
	for name, r := range byTenant {
		tc := p.cfg.Tenants[name]
		tc.RequireMention = &r.RequireAddress
		tc.FreeResponseChannels = slices.Clone(r.FreeResponseScopes)
		tc.AllowBots = AllowBotsNone
		if r.AllowOtherBots {
			tc.AllowBots = AllowBotsAll
		}
		policies[name] = newPolicy(tc)
	}
	p.policies.Store(&policies)
}
