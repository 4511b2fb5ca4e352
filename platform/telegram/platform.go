package telegram

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"
	lru "github.com/hashicorp/golang-lru/v2"

	"connector/descriptor"
	"connector/internal/loglimit"
	"connector/platform"
	"connector/platform/chatcontext"
	"connector/platform/chatorder"
	"connector/platform/fairshare"
	"connector/store"
)

// Platform is the shared Telegram bot. Build it with New.
type Platform struct {
	deps platform.Deps // with defaults: Key, Metrics and Clock are set
	cfg  Config
	log  *slog.Logger

	bot       *bot.Bot
	transport *http.Transport
	download  *http.Client // inbound files (no timeout: each download has its own)
	// offsets holds each long poll until the previous answer's updates
	// were handled, so no update is confirmed before it is stored.
	offsets   *offsetGate
	scrubber  *strings.Replacer
	secretSum [32]byte // sha256 of the webhook secret

	// owners is the chat ownership (authors.go): chat bindings, scope
	// claims, links and principals; Config.Chats until Bind replaces it.
	owners atomic.Pointer[platform.Ownership]
	grants *platform.Grants   // chats granted by author links
	links  *platform.LinkDesk // redeems "/link <code>" DMs off the delivery path
	egress platform.Egress[*Platform, int64]
	// policies are the tenants' group gates, from Config.Tenants and the
	// relevance their gateways declared (relevance.go); defaultPolicy when
	// absent.
	policies atomic.Pointer[map[string]*policy]
	observed *chatcontext.Log[topicKey]
	sealed   *lru.Cache[draftKey, sealedDraft] // see sealedDrafts
	seals    store.Capabilities                // every instance's seals and group previews (draft.go), in deps.Store; nil without one
	previews *lru.Cache[draftKey, *preview]    // open draft streams of group chats
	drafts   *lru.Cache[wireDraft, draftKey]   // the stream holding each draft id sent to a private chat (wireDraftID)
	// replacing is the work running after its action was answered
	// (afterAnswer).
	replacing *afterWork
	// releases are the seal claims being released here (releaseSeal), by
	// key, each closed once released; with releasesMu.
	releases   map[string]chan struct{}
	releasesMu sync.Mutex
	// storeLogs bounds the warnings of seals failing (storeWarn).
	storeLogs *loglimit.Bucket
	rehosts   *platform.Rehosts // attachments of updates not delivered yet
	// claims hold the seals being sent when several instances share the
	// store (claimSeal); nil otherwise.
	claims store.Claims
	// dmStreams runs each private chat stream's frames and seals one at a
	// time (inStream); it holds the streams with one in flight only.
	dmStreams *chatorder.Queue[draftKey]
	// topics remembers the names of the forum topics the connector created
	// or renamed (topics.go), so that thread_rename can honour its guards
	// although Telegram cannot read a topic's name: with a store every
	// instance sharing it and the next start see the same names, each
	// lookup reading the store (never a copy another instance may have
	// made stale); without one a platform.LocalState.
	topics  store.Capabilities
	mapping atomic.Pointer[mapping]
	// seen remembers the last dedupe_window update_ids, so a redelivered
	// update (a webhook retry, a replayed poll) is dropped, not delivered twice.
	seen *lru.Cache[int64, struct{}]
	// dedupe claims each webhook update in the store when several
	// instances share it (handle), so a retry another instance gets is
	// not delivered twice; nil with one instance and when long polling.
	dedupe *platform.Dedupe
	// turns ingests each chat's updates in arrival order, and different
	// chats side by side. Unbounded: a webhook's requests (at most
	// webhook_max_connections) and a long poll's batch (its updates are
	// handled before the next poll) bound it.
	turns *chatorder.Queue[int64]
	// answer is the current getUpdates answer's updates the poll worker
	// took so far (batch.go); only that one goroutine touches it.
	answer    []polledUpdate
	unclaimed *lru.Cache[int64, struct{}] // unclaimed chats already logged (the latest 1,024)
	// posterUnknown is when each of the latest 1,024 presses whose prompt's
	// poster route could not look up was first received (posterWait).
	posterUnknown *lru.Cache[int64, time.Time]

	budget *fairshare.Scheduler
	limits *limiter
	desc   descriptor.Descriptor
	health *health

	running   atomic.Bool
	sink      atomic.Pointer[platform.Sink]
	callbacks chan string // callback query ids to answer
	stopPoll  atomic.Pointer[context.CancelCauseFunc]
}

var (
	_ platform.Platform       = (*Platform)(nil)
	_ platform.Routes         = (*Platform)(nil)
	_ platform.Binder         = (*Platform)(nil)
	_ platform.ChatGranter    = (*Platform)(nil)
	_ platform.RelevanceTaker = (*Platform)(nil)
	_ platform.ScopeLocator   = (*Platform)(nil)
	_ platform.TenantKeeper   = (*Platform)(nil)
)

// allowedUpdates are the update types the connector ingests.
var allowedUpdates = []string{
	models.AllowedUpdateMessage, models.AllowedUpdateEditedMessage,
	models.AllowedUpdateChannelPost, models.AllowedUpdateEditedChannelPost,
	models.AllowedUpdateCallbackQuery,
}

// New builds the platform. It does no I/O: the connector starts even when
// Telegram is unreachable, and Status says so until Run gets through.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	deps = deps.WithDefaults()
	weights := fairshare.WeightsOf(cfg.Tenants, func(tc TenantConfig) int { return tc.Weight })
	p := &Platform{
		cfg:       cfg,
		log:       deps.Log.With("platform", platformName),
		deps:      deps,
		observed:  chatcontext.New[topicKey](chatcontext.Bounds{Weights: weights}),
		limits:    newLimiter(cfg.ChatPerSecond, cfg.GroupPerMinute),
		health:    &health{st: platform.Status{Detail: "not started"}, changed: make(chan struct{})},
		callbacks: make(chan string, 256),
		replacing: newAfterWork(),
		releases:  map[string]chan struct{}{},
		turns:     chatorder.New[int64](0),
		dmStreams: chatorder.New[draftKey](0),
	}
	chats := make([]platform.Binding, 0, len(cfg.Chats))
	for chat, tenant := range cfg.Chats { // Validate checked the ids
		chats = append(chats, platform.Binding{Kind: platform.BindChat, ID: chat, Tenant: tenant})
	}
	p.owners.Store(platform.NewOwnership(chats))
	p.seen, _ = lru.New[int64, struct{}](cfg.DedupeWindow) // sizes > 0 (Validate, WithDefaults): cannot fail
	p.sealed, _ = lru.New[draftKey, sealedDraft](sealedDrafts)
	if deps.Store != nil {
		p.seals = deps.Store.Capabilities()
	}
	p.storeLogs = loglimit.NewBucket(storeLogRate, p.deps.Clock)
	p.unclaimed, _ = lru.New[int64, struct{}](1024)
	p.posterUnknown, _ = lru.New[int64, time.Time](1024)
	p.rehosts = platform.NewRehosts(p.deps.Clock)
	p.previews, _ = lru.New[draftKey, *preview](sealedDrafts)
	p.drafts, _ = lru.New[wireDraft, draftKey](sealedDrafts)
	p.topics = platform.StateOr(deps.Store, localTopics, p.deps.Clock)
	p.grants = platform.NewGrants(platformName, deps.Vault, p.deps.Clock, p.log)
	p.links = platform.NewLinkDesk(p.deps.Clock)
	p.SetRelevance(nil)
	p.secretSum = sha256.Sum256([]byte(cfg.WebhookSecret))
	p.scrubber = newScrubber(cfg.BotToken, cfg.WebhookSecret)
	p.budget = fairshare.New(fairshare.Config{
		Rate: float64(max(cfg.GlobalPerSecond, 0)), Burst: max(cfg.GlobalPerSecond, 1), Weights: weights,
		Clock: p.deps.Clock,
	})
	p.egress = platform.Egress[*Platform, int64]{Ops: handlers, Chat: chatIDOf, Timeout: cfg.RequestTimeout, Grants: p.grants, Vault: deps.Vault, PromptsAsked: p.promptsAsked, Clock: p.deps.Clock}
	p.desc = descriptor.Telegram(handlers.Names())

	p.transport = http.DefaultTransport.(*http.Transport).Clone()
	p.transport.MaxIdleConnsPerHost = 32
	p.offsets = newOffsetGate(p.transport, p.pollReady, cfg.PollTimeout+15*time.Second)
	p.download = &http.Client{Transport: p.transport}
	p.bot = p.newBot()
	// The normalization context (Validate checked the topics); the bot id
	// is the token's numeric prefix, so no getMe is needed to start.
	group, _ := topicNames(cfg.GroupTopics, false)
	dm, _ := topicNames(cfg.DMTopics, true)
	p.mapping.Store(&mapping{botID: p.bot.ID(), groupTopics: group, dmTopics: dm})
	p.claims = deps.SharedClaims()
	if claims := p.claims; claims != nil && cfg.WebhookURL != "" {
		p.dedupe = &platform.Dedupe{Claims: claims, Clock: p.deps.Clock, Prefix: "telegram/" + strconv.FormatInt(p.bot.ID(), 10) + "/",
			Pending: webhookPending, Window: webhookDedupeWindow, Log: p.log}
	}
	return p, nil
}

// newBot builds a Bot API client: the one the platform calls, and a fresh
// one for each long poll (poll).
func (p *Platform) newBot() *bot.Bot {
	// No client timeout: the gate bounds each call from when it goes out.
	client := &http.Client{Transport: p.offsets}
	b, _ := bot.New(p.cfg.BotToken, // cannot fail: Validate checked the token, and getMe is skipped
		bot.WithSkipGetMe(),
		bot.WithServerURL(p.cfg.APIServerURL),
		bot.WithHTTPClient(p.cfg.PollTimeout, client),
		bot.WithErrorsHandler(p.libraryError),
		bot.WithDefaultHandler(p.polled),
		bot.WithNotAsyncHandlers(),
		bot.WithWorkers(1),
		bot.WithUpdatesChannelCap(0),
		bot.WithAllowedUpdates(allowedUpdates),
	)
	return b
}

// policy returns tenant's group trigger policy.
func (p *Platform) policy(tenant string) *policy {
	if pol := (*p.policies.Load())[tenant]; pol != nil {
		return pol
	}
	return defaultPolicy
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform.
func (p *Platform) Descriptor() descriptor.Descriptor { return p.desc }

// ChatTenant implements platform.Platform: the tenant the chat id, in its
// canonical spelling (as sources carry it), is bound to
// (platform.Ownership.Owner).
func (p *Platform) ChatTenant(_ context.Context, chatID string) (string, error) {
	if _, err := parseChatID(chatID); err == nil {
		if tenant, ok := p.owners.Load().Owner(chatOf(chatID)); ok {
			return tenant, nil
		}
	}
	return "", platform.ErrUnknownChat
}

// chatOf places a chat id in its canonical spelling for the ownership
// order: a private chat's id is its user's, positive; groups, supergroups
// and channels are negative.
func chatOf(chatID string) platform.Chat {
	return platform.Chat{ID: chatID, DM: !strings.HasPrefix(chatID, "-")}
}

// LocateChat implements platform.ScopeLocator: any chat id, spelled as a
// number, is placed without asking Telegram (a claim of a private chat is
// refused as a DM's).
func (p *Platform) LocateChat(_ context.Context, chatID string) (platform.Chat, error) {
	n, err := strconv.ParseInt(chatID, 10, 64)
	if err != nil || n == 0 {
		return platform.Chat{}, platform.ErrUnknownChat
	}
	return chatOf(strconv.FormatInt(n, 10)), nil
}

// Status implements platform.Platform.
func (p *Platform) Status() platform.Status {
	st, _ := p.health.watch()
	return st
}

// StatusChanges returns the status and a channel closed at its next change,
// so a caller can wait for readiness without polling.
func (p *Platform) StatusChanges() (platform.Status, <-chan struct{}) { return p.health.watch() }

// Routes implements platform.Routes: the webhook endpoint in webhook mode,
// nothing when long polling.
func (p *Platform) Routes() map[string]http.Handler {
	if p.cfg.WebhookURL == "" {
		return nil
	}
	return map[string]http.Handler{http.MethodPost + " " + WebhookPath: http.HandlerFunc(p.serveWebhook)}
}

func newScrubber(token, webhookSecret string) *strings.Replacer {
	pairs := []string{token, "[redacted]"}
	if _, secret, ok := strings.Cut(token, ":"); ok && secret != "" {
		pairs = append(pairs, secret, "[redacted]")
	}
	if webhookSecret != "" {
		pairs = append(pairs, webhookSecret, "[redacted]")
	}
	return strings.NewReplacer(pairs...)
}

// errorText is err's text for logs and results, the bot token and the
// webhook secret removed.
func (p *Platform) errorText(err error) string { return p.scrubber.Replace(err.Error()) }

// SetTenants implements platform.TenantKeeper: the messages held back
// for a tenant not in created, or for an earlier creation of one, are
// forgotten.
func (p *Platform) SetTenants(created map[string]time.Time) { p.observed.SetTenants(created) }

// Bind implements platform.Binder: the bindings of kind chat and of the
// author kinds (platform.IsAuthorKind) replace the chat ownership
// (platform.Ownership); ids are read in their canonical spelling (a
// principal's is its policy).
func (p *Platform) Bind(bindings []platform.Binding) error {
	for _, b := range bindings {
		if b.Kind != platform.BindChat && !platform.IsAuthorKind(b.Kind) {
			return fmt.Errorf("telegram: binding kind %q: want %s or an author kind", b.Kind, platform.BindChat)
		}
		if _, err := parseChatID(b.ID); err != nil && b.Kind != platform.BindPrincipal {
			return fmt.Errorf("telegram: %s %q: %w", b.Kind, b.ID, err)
		}
	}
	p.owners.Store(platform.NewOwnership(bindings))
	return nil
}
