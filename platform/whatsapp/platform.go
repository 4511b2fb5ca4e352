package whatsapp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connector/descriptor"
	"connector/platform"
	"connector/platform/chatorder"
	"connector/platform/fairshare"
	"connector/platform/pace"
	"connector/vault"
)

// Platform is the WhatsApp Cloud API app shared by the tenants that own
// its business numbers. Build it with New.
type Platform struct {
	deps     platform.Deps
	cfg      Config
	log      *slog.Logger
	statuses StatusMetrics // nil when deps.Metrics does not count statuses

	graph       *graph
	scrubber    *strings.Replacer
	verifySum   [32]byte // sha256 of the verify token
	vault       vault.Store
	numbers     atomic.Pointer[map[string]string]    // phone number id -> tenant; replaced by Bind
	owners      atomic.Pointer[platform.Ownership]   // numbers and linked users; replaced by Bind
	tenants     atomic.Pointer[map[string]time.Time] // the configured tenants; replaced by SetTenants
	gates       map[string]*access                   // tenant -> DM gate
	defaultGate *access
	turns       *chatorder.Queue[string] // one chat (number/user) at a time, chats side by side
	egress      platform.Egress[*Platform, string]
	budget      *fairshare.Scheduler // the app's (GlobalPerSecond)
	numberMu    sync.Mutex
	perNumber   map[string]*fairshare.Scheduler // each business number's (NumberPerSecond), made on first send
	pace        *pace.Pacer                     // each (number, user)
	throttled   *pace.Pacer                     // each tenant as created (heldAs), and (number, tenant), held after Meta throttled it (paced; appCall waits out the tenant's)
	quotes      *quotes
	grants      *platform.Grants   // the marks of messages sent (quotes), and the numbers no tenant owns its linked users wrote to (ingest)
	links       *platform.LinkDesk // redeems "/link <code>" DMs off the delivery path
	rehosts     *platform.Rehosts  // attachments of messages not delivered yet
	desc        descriptor.Descriptor

	sink         atomic.Pointer[platform.Sink] // nil unless Run runs
	tokenRefused atomic.Bool                   // Meta refused the access token (code 190) on the last call that told
}

var (
	_ platform.Platform     = (*Platform)(nil)
	_ platform.Routes       = (*Platform)(nil)
	_ platform.Binder       = (*Platform)(nil)
	_ platform.TenantKeeper = (*Platform)(nil)
)

// StatusMetrics is implemented by a Deps.Metrics that counts the delivery
// statuses (sent, delivered, read, failed) Meta reports for each tenant's
// messages.
type StatusMetrics interface {
	DeliveryStatus(platform, tenant, status string)
}

// New builds the platform. It does no I/O.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	deps = deps.WithDefaults()
	p := &Platform{
		deps:  deps,
		cfg:   cfg,
		log:   deps.Log.With("platform", platformName),
		vault: deps.Vault,
		gates: make(map[string]*access, len(cfg.Tenants)),
	}
	p.statuses, _ = deps.Metrics.(StatusMetrics)
	if p.vault == nil {
		p.vault = vault.NewMemory(vault.Config{Clock: deps.Clock})
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 32
	p.graph = &graph{base: cfg.APIURL + "/" + cfg.APIVersion, token: cfg.AccessToken, hc: &http.Client{Transport: transport}}
	p.scrubber = strings.NewReplacer(cfg.AccessToken, "[redacted]", cfg.AppSecret, "[redacted]", cfg.VerifyToken, "[redacted]")
	p.verifySum = sha256.Sum256([]byte(cfg.VerifyToken))
	p.defaultGate, _ = newAccess(cfg.access(), nil) // Validate checked every gate
	for tenant, tc := range cfg.Tenants {
		p.gates[tenant], _ = newAccess(cfg.access(), &tc)
	}
	bindings := make([]platform.Binding, 0, len(cfg.PhoneNumbers))
	for id, tenant := range cfg.PhoneNumbers {
		bindings = append(bindings, platform.Binding{Kind: platform.BindPhoneNumber, ID: id, Tenant: tenant})
	}
	_ = p.Bind(bindings) // Validate checked the ids
	p.budget = p.newBudget(cfg.GlobalPerSecond)
	p.perNumber = make(map[string]*fairshare.Scheduler)
	p.pace = pace.New(cfg.ChatPerSecond)
	p.throttled = pace.New(0)
	p.grants = platform.NewGrants(platformName, p.vault, p.deps.Clock, p.log)
	p.quotes = newQuotes(p.vault, p.deps.Clock, p.grants)
	p.links = platform.NewLinkDesk(deps.Clock)
	p.rehosts = platform.NewRehosts(deps.Clock)
	p.egress = newEgress(cfg.RequestTimeout)
	p.egress.Vault = deps.Vault
	p.turns = chatorder.New[string](0)
	p.desc = descriptor.WhatsApp(handlers.Names())
	return p, nil
}

// newBudget is a budget of perSecond calls a second (none when negative),
// shared between tenants by their weights.
func (p *Platform) newBudget(perSecond int) *fairshare.Scheduler {
	return fairshare.New(fairshare.Config{
		Rate: float64(max(perSecond, 0)), Burst: max(perSecond, 1), Clock: p.deps.Clock,
		Weights: fairshare.WeightsOf(p.cfg.Tenants, func(tc TenantConfig) int { return tc.Weight }),
	})
}

// numberBudget is the send budget of business number (phone number id),
// shared between the tenants sending from it; the numbers are the bound
// ones, so the map stays as small as the configuration.
func (p *Platform) numberBudget(number string) *fairshare.Scheduler {
	p.numberMu.Lock()
	defer p.numberMu.Unlock()
	b := p.perNumber[number]
	if b == nil {
		b = p.newBudget(p.cfg.NumberPerSecond)
		p.perNumber[number] = b
	}
	return b
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform.
func (p *Platform) Descriptor() descriptor.Descriptor { return p.desc }

// Routes implements platform.Routes: the webhook's handshake and events.
func (p *Platform) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		http.MethodGet + " " + WebhookPath:  http.HandlerFunc(p.serveVerify),
		http.MethodPost + " " + WebhookPath: http.HandlerFunc(p.serveWebhook),
	}
}

// Run implements platform.Platform: webhooks are delivered into sink, and
// "/link <code>" DMs redeemed on the link desk's workers, until ctx ends.
// There is nothing to connect to: the Graph API is called per action.
func (p *Platform) Run(ctx context.Context, sink platform.Sink) error {
	p.sink.Store(&sink)
	p.links.Run(ctx) // until ctx ends
	p.sink.Store(nil)
	return nil
}

// Status implements platform.Platform: ready while Run runs, unless Meta
// refused the access token on the last call that told.
func (p *Platform) Status() platform.Status {
	switch {
	case p.sink.Load() == nil:
		return platform.Status{Detail: "not started"}
	case p.tokenRefused.Load():
		return platform.Status{Detail: "Meta refused the access token (Graph error 190); set a valid whatsapp.access_token"}
	}
	return platform.Status{Ready: true, Detail: "receiving webhooks at " + WebhookPath}
}

// noteToken records whether Meta accepted the access token, from a Graph
// call's error; a network failure says nothing about it.
func (p *Platform) noteToken(err error) {
	if ge, isGraph := err.(*GraphError); isGraph || err == nil {
		p.tokenRefused.Store(isGraph && ge.Code == codeTokenInvalid)
	}
}

// gate returns tenant's DM gate.
func (p *Platform) gate(tenant string) *access {
	if a := p.gates[tenant]; a != nil {
		return a
	}
	return p.defaultGate
}

// ownNumber is the business number a tenant sends from when its
// conversation names none: the lowest id it owns, "" for none.
func (p *Platform) ownNumber(tenant string) (own string) {
	for id, t := range *p.numbers.Load() {
		if t == tenant && (own == "" || id < own) {
			own = id
		}
	}
	return own
}

// Bind implements platform.Binder: bindings of kind phone_number (a phone
// number id) and the author kinds user and dm_default (a wa_id) replace
// the ownership table (platform.Ownership). Other kinds are refused.
func (p *Platform) Bind(bindings []platform.Binding) error {
	numbers := make(map[string]string, len(bindings))
	owned := make([]platform.Binding, 0, len(bindings))
	for _, b := range bindings {
		switch b.Kind {
		case platform.BindPhoneNumber, platform.BindUser, platform.BindDMDefault:
			if !platform.ValidWhatsAppID(b.ID) {
				return fmt.Errorf("whatsapp_cloud: %s %q: want digits", b.Kind, b.ID)
			}
		default:
			return fmt.Errorf("whatsapp_cloud: binding kind %q: want %s, %s or %s", b.Kind, platform.BindPhoneNumber, platform.BindUser, platform.BindDMDefault)
		}
		if b.Kind == platform.BindPhoneNumber {
			numbers[b.ID] = b.Tenant
			b.ID = numberSpace(b.ID)
		}
		owned = append(owned, b)
	}
	p.numbers.Store(&numbers)
	p.owners.Store(platform.NewOwnership(owned))
	return nil
}

// SetTenants implements platform.TenantKeeper: a delivery status is
// counted under the sender it names only while that is a configured
// tenant (Platform.status); until the first call (a platform run without
// the registry) under any.
func (p *Platform) SetTenants(created map[string]time.Time) {
	c := maps.Clone(created)
	p.tenants.Store(&c)
}

// numberSpace is a business number as the ownership order's space: the
// chats (users) writing to it are in it. The prefix keeps a number id
// from ever reading as a wa_id.
func numberSpace(number string) string { return "number:" + number }

// chatOf is the conversation of user with a business number as the
// ownership order reads it: a DM in the number's space ("" for none).
func chatOf(user, number string) platform.Chat {
	c := platform.Chat{ID: user, DM: true}
	if number != "" {
		c.Space = numberSpace(number)
	}
	return c
}

// ChatTenant implements platform.Platform. A WhatsApp chat is a user
// (wa_id), and every tenant whose number the user wrote to has its own
// conversation with them; so the answer is the asking tenant (WithTenant)
// when the ownership order lets it act in its conversation with the user
// (mayAct), an error wrapping platform.ErrUnavailable when the store could
// not tell its conversation (its own, whoever the user is), and
// ErrUnknownChat otherwise: nothing about other tenants is revealed.
func (p *Platform) ChatTenant(ctx context.Context, chatID string) (string, error) {
	tenant := platform.TenantOf(ctx)
	if tenant == "" || !platform.ValidWhatsAppID(chatID) {
		return "", platform.ErrUnknownChat
	}
	switch _, ok, err := p.sender(ctx, tenant, chatID); {
	case ok:
		return tenant, nil
	case err != nil:
		return "", err
	}
	return "", platform.ErrUnknownChat
}

// sender returns the chat tenant acts in with user, with the business
// number it goes out from, when the ownership order lets it: the
// conversation the user's last message routed to tenant opened, while its
// number is tenant's own or (a number no tenant owns) reached tenant by
// author link (mayAct), which holds only while the user is still linked
// to tenant (the conversation outlives a revoked link or an unbound number
// by up to 30 days); else, when the store could not tell the
// conversation, err (wrapping platform.ErrUnavailable: the user may have
// written to another number than the next rule's); else, for a user
// linked to tenant, tenant's own lowest number. ok is false otherwise.
func (p *Platform) sender(ctx context.Context, tenant, user string) (c chat, ok bool, err error) {
	cv, ok, err := p.conversation(ctx, tenant, user)
	switch {
	case ok && p.mayAct(tenant, user, cv.Number):
		return chat{user: user, number: cv.Number, last: cv.Last, wrote: cv.wrote}, true, nil
	case err != nil:
		return chat{}, false, fmt.Errorf("whatsapp: conversation: %w", platform.ErrUnavailable)
	}
	if number := p.ownNumber(tenant); number != "" && p.owners.Load().Linked(user, tenant) {
		return chat{user: user, number: number}, true, nil
	}
	return chat{}, false, nil
}

// mayAct reports whether the ownership order lets tenant act on user from
// number (platform.Ownership.MayAct): the number is tenant's own, or no
// tenant's and the user is linked to tenant (how such a number reaches
// one: Route, rule 3).
func (p *Platform) mayAct(tenant, user, number string) bool {
	own := p.owners.Load()
	return own.MayAct(tenant, chatOf(user, number), func() bool { return own.Linked(user, tenant) })
}

// conv is a tenant's conversation with a user: the business number the
// user last wrote to and that message's id.
type conv struct {
	Number string    `json:"n"`
	Last   string    `json:"m,omitempty"`
	wrote  time.Time // when the user sent that message (the vault entry's Stored)
}

// conversationKey is the vault key of tenant's conversation with user.
func conversationKey(tenant, user string) vault.Key {
	return vault.Key{Tenant: tenant, SessionKey: user, Kind: vault.KindWhatsAppConversation}
}

// conversation returns tenant's conversation with user; err is set when
// the store could not tell (vault.Lookup).
func (p *Platform) conversation(ctx context.Context, tenant, user string) (conv, bool, error) {
	e, ok, err := vault.Lookup(ctx, p.vault, conversationKey(tenant, user))
	if !ok {
		return conv{}, false, err
	}
	var c conv
	if json.Unmarshal([]byte(e.Ref), &c) != nil {
		return conv{}, false, nil
	}
	c.wrote = e.Stored
	return c, true, nil
}

// converse records that user wrote to number in tenant's conversation at
// sent, last as the latest message id, for tenant as created at created
// (zero: as created now). It is written before the message is delivered,
// so the tenant's answer finds it.
func (p *Platform) converse(ctx context.Context, tenant, user string, c conv, sent, created time.Time) {
	ref, _ := json.Marshal(c) // two strings: cannot fail
	if err := p.vault.Put(ctx, conversationKey(tenant, user), vault.Entry{Ref: string(ref), Stored: sent, Created: created}); err != nil {
		p.log.Warn("whatsapp conversation not stored", "tenant", tenant, "user_id", user, "err", err)
	}
}

// errorText is err's text for logs and results, every credential removed.
func (p *Platform) errorText(err error) string { return p.scrubber.Replace(err.Error()) }
