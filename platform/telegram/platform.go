package telegram

import (
	"context"
	"crypto/sha256"
	"errors"
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
	"connector/internal/clock"
	"connector/platform"
	"connector/platform/chatcontext"
	"connector/platform/fairshare"
)

// Platform is the shared Telegram bot. Build it with New.
type Platform struct {
	deps    platform.Deps // for RunExclusive
	cfg     Config
	log     *slog.Logger
	key     platform.KeyFunc
	metrics platform.Metrics
	clock   clock.Clock
	now     func() time.Time // clock.Now

	bot       *bot.Bot
	transport *http.Transport
	download  *http.Client // inbound files (no timeout: each download has its own)
	// offsets holds each long poll until the previous answer's updates
	// were handled, so no update is confirmed before it is stored.
	offsets   *offsetGate
	scrubber  *strings.Replacer
	secretSum [32]byte // sha256 of the webhook secret

	chats   atomic.Pointer[map[int64]string] // chat id -> tenant; replaced by Bind
	authors atomic.Pointer[platform.Authors] // author routing (authors.go); replaced by Bind
	grants  *platform.Grants                 // chats granted by author routing
	// policies are the tenants' group gates, from Config.Tenants and the
	// relevance their gateways declared (relevance.go); defaultPolicy when
	// absent.
	policies  atomic.Pointer[map[string]*policy]
	observed  *chatcontext.Log[observedKey]
	sealed    *lru.Cache[draftKey, string]   // see sealedDrafts
	previews  *lru.Cache[draftKey, *preview] // open draft streams of group chats
	topics    *topicMemory
	mapping   atomic.Pointer[mapping]
	seen      *recentIDs
	stripes   [64]sync.Mutex // serialize delivery per chat (by chat id)
	unclaimed chatSet        // unclaimed chats already logged

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
	cfg = cfg.withDefaults()
	deps = deps.WithDefaults()
	p := &Platform{
		cfg:       cfg,
		log:       deps.Log.With("platform", platformName),
		deps:      deps,
		key:       deps.Key,
		metrics:   deps.Metrics,
		clock:     deps.Clock,
		now:       deps.Clock.Now,
		observed:  chatcontext.New[observedKey](chatcontext.Bounds{}),
		seen:      newRecentIDs(cfg.DedupeWindow),
		limits:    newLimiter(cfg.ChatPerSecond, cfg.GroupPerMinute),
		health:    newHealth("not started"),
		callbacks: make(chan string, 256),
	}
	chats := make(map[int64]string, len(cfg.Chats))
	for chat, tenant := range cfg.Chats {
		id, _ := parseChatID(chat) // Validate checked it
		chats[id] = tenant
	}
	p.chats.Store(&chats)
	p.sealed, _ = lru.New[draftKey, string](sealedDrafts) // size > 0: cannot fail
	p.previews, _ = lru.New[draftKey, *preview](sealedDrafts)
	p.topics = newTopicMemory(deps.State, p.now)
	p.authors.Store(platform.NewAuthors(nil))
	p.grants = platform.NewGrants(deps.Vault, p.now, p.log)
	p.SetRelevance(nil)
	m, err := p.liveMapping()
	if err != nil {
		return nil, err
	}
	p.mapping.Store(m)
	p.secretSum = sha256.Sum256([]byte(cfg.WebhookSecret))
	p.scrubber = newScrubber(cfg.BotToken, cfg.WebhookSecret)
	p.budget = fairshare.New(fairshare.Config{
		Rate: float64(max(cfg.GlobalPerSecond, 0)), Burst: max(cfg.GlobalPerSecond, 1), Weights: cfg.weights(),
		Clock: p.clock,
	})
	p.desc = descriptor.Telegram(handlers.Names())

	p.transport = http.DefaultTransport.(*http.Transport).Clone()
	p.transport.MaxIdleConnsPerHost = 32
	p.offsets = newOffsetGate(p.transport)
	p.download = &http.Client{Transport: p.transport}
	client := &http.Client{
		Transport: &pollObserver{base: p.offsets, onReady: p.pollReady},
		Timeout:   cfg.PollTimeout + 15*time.Second,
	}
	p.bot, err = bot.New(cfg.BotToken,
		bot.WithSkipGetMe(),
		bot.WithServerURL(cfg.APIServerURL),
		bot.WithHTTPClient(cfg.PollTimeout, client),
		bot.WithErrorsHandler(p.libraryError),
		bot.WithDefaultHandler(p.polled),
		bot.WithNotAsyncHandlers(),
		bot.WithWorkers(1),
		bot.WithUpdatesChannelCap(0),
		bot.WithAllowedUpdates(allowedUpdates),
	)
	if err != nil {
		return nil, errors.New("telegram: cannot build the bot client")
	}
	return p, nil
}

// liveMapping builds the normalization context from the config; the bot id
// is the token's numeric prefix, so no getMe is needed to start.
func (p *Platform) liveMapping() (*mapping, error) {
	idText, _, _ := strings.Cut(p.cfg.BotToken, ":")
	id, _ := strconv.ParseInt(idText, 10, 64) // Validate checked it
	group, err := topicNames(p.cfg.GroupTopics, false)
	if err != nil {
		return nil, fmt.Errorf("telegram.group_topics%w", err)
	}
	dm, err := topicNames(p.cfg.DMTopics, true)
	if err != nil {
		return nil, fmt.Errorf("telegram.dm_topics%w", err)
	}
	return &mapping{botID: id, groupTopics: group, dmTopics: dm}, nil
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

// ChatTenant implements platform.Platform: the tenant is the one whose
// config claims the chat id.
func (p *Platform) ChatTenant(_ context.Context, chatID string) (string, error) {
	if _, tenant := p.chatOwner(chatID); tenant != "" {
		return tenant, nil
	}
	return "", platform.ErrUnknownChat
}

// chatOwner parses a chat id in its canonical spelling (as sources carry
// it) and returns the tenant that claims it.
func (p *Platform) chatOwner(chatID string) (int64, string) {
	id, err := parseChatID(chatID)
	if err != nil {
		return 0, ""
	}
	return id, (*p.chats.Load())[id]
}

// Status implements platform.Platform.
func (p *Platform) Status() platform.Status { return p.health.get() }

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

// Bind implements platform.Binder: bindings of kind chat (the id in its
// canonical spelling) replace the chat routing table, those of the author
// kinds (platform.IsAuthorKind) the author table.
func (p *Platform) Bind(bindings []platform.Binding) error {
	chats := make(map[int64]string, len(bindings))
	var authors []platform.Binding
	for _, b := range bindings {
		switch {
		case b.Kind == platform.BindPrincipal:
			authors = append(authors, b)
		case b.Kind == platform.BindChat || platform.IsAuthorKind(b.Kind):
			id, err := parseChatID(b.ID)
			if err != nil {
				return fmt.Errorf("telegram: %s %q: %w", b.Kind, b.ID, err)
			}
			if b.Kind == platform.BindChat {
				chats[id] = b.Tenant
				continue
			}
			b.ID = strconv.FormatInt(id, 10)
			authors = append(authors, b)
		default:
			return fmt.Errorf("telegram: binding kind %q: want %s or an author kind", b.Kind, platform.BindChat)
		}
	}
	p.chats.Store(&chats)
	p.authors.Store(platform.NewAuthors(authors))
	return nil
}
