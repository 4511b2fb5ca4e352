// Package slack fronts one Slack app for many tenants: it verifies and
// ingests Slack's events, interactions and slash commands (signed HTTP
// routes, or Socket Mode), normalizes messages into the tenant-scoped
// MessageEvents the native Hermes adapter builds, and executes the
// gateways' outbound actions with slack-go's Web API client, within
// Slack's rate tiers. Each file's header says which rule it owns;
// docs/contract.md lists the ops and docs/security.md the routes.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/slack-go/slack"

	"connector/descriptor"
	"connector/internal/clock"
	"connector/internal/loglimit"
	"connector/internal/ttlcache"
	"connector/platform"
	"connector/platform/chatorder"
	"connector/platform/fairshare"
	"connector/platform/pace"
	"connector/store"
)

// Platform is the shared Slack app. Build it with New.
type Platform struct {
	cfg     Config
	deps    platform.Deps
	log     *slog.Logger
	metrics platform.Metrics
	clock   clock.Clock

	http   *http.Client // Web API, files, response_url
	desc   descriptor.Descriptor
	status atomic.Pointer[platform.Status]

	// owners is the chat ownership (authors.go): workspace and channel
	// bindings, scope claims, author links; replaced by Bind.
	owners atomic.Pointer[platform.Ownership]
	// teams are the workspaces bound to tenants (workspace -> tenant), the
	// workspaces a tenant's chats are looked up in; replaced by Bind when
	// they change.
	teams atomic.Pointer[map[string]string]
	// weights are the fair-share weights of the tenants of cfg.Tenants
	// and of the bindings (Bind), which share the intake (intakeBound).
	weights  atomic.Pointer[map[string]int]
	grants   *platform.Grants   // chats granted by author routing
	links    *platform.LinkDesk // redeems "/link <code>" DMs off the delivery path
	rehosts  *platform.Rehosts  // files of messages not delivered yet
	policies map[string]*policy // tenant -> knobs; defaultPol when absent
	defPol   *policy

	works     *workspaces
	names     *names
	memory    *memory
	dedupe    *platform.Dedupe         // events once (dedupe.go)
	claims    store.Claims             // one holder per key (platform.ClaimsFor): dedupe, slash replies, install states
	queues    *chatorder.Queue[string] // ingest in order per chat (team/channel)
	intake    *intake                  // the durable intake (intake.go); nil without a store
	limits    *limits
	chanTeams *lru.Cache[string, []sighting] // channel -> workspaces it was seen in (channelTeams)
	chanMu    sync.Mutex                     // serializes seenIn's read and write of chanTeams, and place's reads of placed and chanTeams
	// placed remembers the channels ChatGranted placed with
	// conversations.info lately (placementTTL): their workspaces are in
	// chanTeams, those bound when they were placed at least (seenIn). Each
	// names the teams bound then, weakly: a change of them ends it.
	placed *ttlcache.Cache[string, weak.Pointer[map[string]string]]
	// notFound remembers, per (tenant, chat), that the tenant's workspaces
	// do not have the chat, for declineMemory: a decline's cost depends
	// only on the asker's own asks. Each names the teams it was found
	// under, weakly (an expired entry stays until read or evicted): a
	// change of the workspaces bound ends it.
	notFound *ttlcache.Cache[string, weak.Pointer[map[string]string]]
	// histories are threads' messages lately read for their context
	// (threadcontext.go).
	histories *ttlcache.Cache[string, []slack.Message]
	streams   *streams // draft streams (draft.go)
	// storeLogs bounds the warnings of draft streams' store failures
	// (storeWarn).
	storeLogs *loglimit.Bucket
	// intakeLogs bounds the warnings of requests the full intake refused
	// (admit).
	intakeLogs *loglimit.Bucket
	egress     platform.Egress[*Platform, string]

	running atomic.Bool
	sink    atomic.Pointer[platform.Sink]
	bg      sync.WaitGroup // background work Run waits for: socket mode jobs, prompt updates
	// besides holds a slot per Socket Mode envelope handled beside the
	// reader (beside, maxBeside).
	besides chan struct{}
	// busyPosts holds a slot per busy answer being posted (tellBusy,
	// maxBusyPosts).
	busyPosts *fairshare.Slots
}

var (
	_ platform.Platform     = (*Platform)(nil)
	_ platform.Routes       = (*Platform)(nil)
	_ platform.Binder       = (*Platform)(nil)
	_ platform.ChatGranter  = (*Platform)(nil)
	_ platform.ScopeLocator = (*Platform)(nil)
)

// maxInFlight bounds the events being ingested or waiting for their
// chat's turn, across chats: past it a webhook waits (Slack retries one
// that took too long) and Socket Mode reads no further.
const maxInFlight = 16_384

// chanTeamsSize bounds the channels whose workspaces are remembered (and
// the declines).
const chanTeamsSize = 100_000

// seenFor is how long a channel is taken to be in a workspace after it was
// last seen there (seenIn): a Slack Connect channel one stopped sharing is
// asked about again then. A sighting is recorded again once seenRenew old.
const (
	seenFor   = 24 * time.Hour
	seenRenew = time.Hour
)

// sighting is a workspace a channel was seen in, and when last.
type sighting struct {
	team string
	at   time.Time
}

// maxUnboundTeams bounds the workspaces bound to no tenant recorded for a
// channel (seenIn).
const maxUnboundTeams = 8

// declineMemory is how long a chat found in none of a tenant's workspaces
// is not looked up again for it.
const declineMemory = 30 * time.Second

// placementTTL is how long the workspaces conversations.info named for a
// channel a grant or claim is judged in stand before they are asked again
// (a Slack Connect channel may be shared with more workspaces meanwhile).
const placementTTL = time.Hour

// New builds the platform. It does no I/O: the connector starts while
// Slack is unreachable, and Status says so until Run gets through.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	deps = deps.WithDefaults()
	p := &Platform{
		cfg:      cfg,
		deps:     deps,
		log:      deps.Log.With("platform", platformName),
		metrics:  deps.Metrics,
		clock:    deps.Clock,
		http:     &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		policies: make(map[string]*policy, len(cfg.Tenants)),
		defPol:   defaultPolicy(cfg.AllowAllUsers),
	}
	for tenant, tc := range cfg.Tenants {
		pol, _ := newPolicy(tc, cfg.AllowAllUsers) // Validate checked it
		p.policies[tenant] = pol
	}
	bindings := make([]platform.Binding, 0, len(cfg.Teams))
	for team, tenant := range cfg.Teams {
		bindings = append(bindings, platform.Binding{Kind: platform.BindTeam, ID: team, Tenant: tenant})
	}
	_ = p.Bind(bindings) // Validate checked the ids
	p.links = platform.NewLinkDesk(p.clock)
	p.storeLogs = loglimit.NewBucket(storeLogRate, p.clock)
	p.intakeLogs = loglimit.NewBucket(storeLogRate, p.clock)
	p.rehosts = platform.NewRehosts(p.clock)
	p.grants = platform.NewGrants(platformName, deps.Vault, p.clock, p.log)
	// A channel evicted takes its placement along: place asks again what it
	// no longer knows all of (heldAlone fails closed meanwhile). Evictions
	// happen in seenIn alone, under chanMu.
	p.chanTeams, _ = lru.NewWithEvict(chanTeamsSize, func(channel string, _ []sighting) { p.placed.Remove(channel) }) // size > 0: cannot fail
	p.notFound = ttlcache.New[string, weak.Pointer[map[string]string]](chanTeamsSize, declineMemory, p.clock)
	p.placed = ttlcache.New[string, weak.Pointer[map[string]string]](chanTeamsSize, placementTTL, p.clock)
	p.histories = ttlcache.New[string, []slack.Message](threadContextSize, threadContextTTL, p.clock)
	p.works = newWorkspaces(p)
	p.names = newNames(p)
	p.memory = &memory{caps: platform.StateOr(deps.Store, memorySize, p.clock), clock: p.clock, vault: deps.Vault}
	p.claims = platform.ClaimsFor(deps, localClaims, p.clock)
	p.dedupe = &platform.Dedupe{Claims: p.claims, Clock: p.clock, Prefix: "slack/", Pending: pendingTTL, Window: cfg.DedupeWindow, Log: p.log}
	p.queues = chatorder.New[string](maxInFlight)
	if deps.Store != nil {
		p.intake = &intake{pending: map[string]int{}, held: map[string]heldEntry{}, until: map[string]time.Time{}, sure: map[string]time.Time{},
			charged: map[charge]int{}, bound: p.intakeBound}
	}
	p.besides = make(chan struct{}, maxBeside)
	p.busyPosts = fairshare.NewSlots(maxBusyPosts)
	p.limits = &limits{p: p, budgets: ttlcache.New[budgetKey, *fairshare.Scheduler](budgetsSize, budgetIdle, p.clock), channels: pace.New(cfg.ChannelPerSecond)}
	p.streams = &streams{state: platform.StateOr(deps.Store, localStreams, p.clock), clock: p.clock, turns: chatorder.New[streamKey](0), vault: deps.Vault}
	p.egress = newEgress(cfg.assistant(), cfg.RequestTimeout)
	p.egress.Grants, p.egress.Vault, p.egress.Clock = p.grants, deps.Vault, p.clock
	p.desc = descriptor.Slack(p.egress.Ops.Names())
	p.setStatus(platform.Status{Detail: "not started"})
	return p, nil
}

// policy returns tenant's knobs.
func (p *Platform) policy(tenant string) *policy {
	if pol := p.policies[tenant]; pol != nil {
		return pol
	}
	return p.defPol
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform.
func (p *Platform) Descriptor() descriptor.Descriptor { return p.desc }

// Status implements platform.Platform.
func (p *Platform) Status() platform.Status { return *p.status.Load() }

func (p *Platform) setStatus(st platform.Status) {
	if cur := p.status.Load(); cur != nil && cur.Terminal {
		return
	}
	p.status.Store(&st)
}

// Routes implements platform.Routes: the signed webhooks when a signing
// secret is set, the OAuth install routes when a client id is.
func (p *Platform) Routes() map[string]http.Handler {
	r := map[string]http.Handler{}
	if p.cfg.SigningSecret != "" {
		r[http.MethodPost+" "+EventsPath] = http.HandlerFunc(p.serveEvents)
		r[http.MethodPost+" "+InteractionsPath] = http.HandlerFunc(p.serveInteractions)
		r[http.MethodPost+" "+CommandsPath] = http.HandlerFunc(p.serveCommands)
	}
	if p.cfg.ClientID != "" {
		r[http.MethodGet+" "+InstallPath] = http.HandlerFunc(p.serveInstall)
		r[http.MethodGet+" "+OAuthCallbackPath] = http.HandlerFunc(p.serveOAuthCallback)
	}
	return r
}

// tokenPattern matches a Slack token of any kind.
var tokenPattern = regexp.MustCompile(`x(?:ox[abeprs]|app)-[A-Za-z0-9-]+`)

// errorText is err's text for logs and results, with every Slack token,
// the signing secrets and the client secret removed.
func (p *Platform) errorText(err error) string {
	s := tokenPattern.ReplaceAllString(err.Error(), "[redacted]")
	for _, secret := range []string{p.cfg.SigningSecret, p.cfg.PreviousSigningSecret, p.cfg.ClientSecret} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// Bind implements platform.Binder: bindings of kind team (a workspace id)
// and channel (a conversation id), and of the author kinds
// (platform.IsAuthorKind), replace the chat ownership
// (platform.Ownership). The YAML's slack.teams are bindings too.
func (p *Platform) Bind(bindings []platform.Binding) error {
	teams := map[string]string{}
	for _, b := range bindings {
		switch {
		case b.Kind == platform.BindTeam && teamIDPattern.MatchString(b.ID):
			teams[b.ID] = b.Tenant
		case b.Kind == platform.BindChannel && channelIDPattern.MatchString(b.ID),
			b.Kind == platform.BindPrincipal,
			(b.Kind == platform.BindUser || b.Kind == platform.BindAllow || b.Kind == platform.BindDMDefault) && userIDPattern.MatchString(b.ID),
			b.Kind == platform.BindScope && channelIDPattern.MatchString(b.ID):
		default:
			return fmt.Errorf("slack: binding %s %q: want a team (T...), a channel (C..., G..., D...) or an author kind", b.Kind, b.ID)
		}
	}
	if old := p.teams.Load(); old == nil || !maps.Equal(*old, teams) { // else the declines stand (notFound)
		p.teams.Store(&teams)
	}
	p.owners.Store(platform.NewOwnership(bindings))
	weights := fairshare.WeightsOf(p.cfg.Tenants, func(tc TenantConfig) int { return tc.Weight })
	for _, b := range bindings {
		if _, ok := weights[b.Tenant]; !ok {
			weights[b.Tenant] = 1
		}
	}
	p.weights.Store(&weights)
	return nil
}

// intakeBound is the most intake entries tenant may be charged, the intake
// otherwise empty (of what other tenants leave, that part: reserve):
// its share of the intake by the weights of the tenants the platform knows
// (fairshare.Share), and at least half of it, so that a busy tenant among
// many takes that half while the others are idle and leaves them the
// other; a deployment of one tenant takes the whole intake. The entries
// routed to no tenant in the chats no tenant holds (""), which anyone in
// such a chat may send, are charged at most intakeTenantShare, with one
// tenant too: half, with a busy tenant's half, would fill the intake.
func (p *Platform) intakeBound(tenant string) int {
	if tenant == "" {
		return intakeTenantShare
	}
	return max(fairshare.Share(intakeMaxHeld, *p.weights.Load(), tenant), intakeMaxHeld/2)
}

// teamTenant returns the tenant a workspace is bound to.
func (p *Platform) teamTenant(team string) string { return (*p.teams.Load())[team] }

// chatTenant returns the tenant that holds chat ("<team>/<channel>"): the
// tenant of its channel binding, else of its workspace's, else its
// claimant (platform.Ownership.Holder); empty when none does.
func (p *Platform) chatTenant(chat string) string {
	team, channel, _ := strings.Cut(chat, "/")
	tenant, _ := p.owners.Load().Holder(chatOf(channel, team))
	return tenant
}

// seenIn records that channel is a conversation of workspace team (from
// an event Slack delivered for it, or conversations.info). A workspace
// recorded stays for seenFor after it was last seen there, or until the
// channel is evicted: a grant is judged against every one (ChatGranted).
// Of the workspaces bound to no tenant,
// which judge nothing, the first maxUnboundTeams are recorded (a Slack
// Connect channel is shared with up to 250 organizations, an org-shared
// one with every workspace of its org); every bound one is.
func (p *Platform) seenIn(channel, team string) {
	if channel == "" || team == "" {
		return
	}
	p.chanMu.Lock()
	defer p.chanMu.Unlock()
	now := p.clock.Now()
	old, _ := p.chanTeams.Peek(channel)
	if slices.ContainsFunc(old, func(s sighting) bool { return s.team == team && now.Sub(s.at) < seenRenew }) {
		return
	}
	teams := make([]sighting, 0, len(old)+1) // readers may hold old
	unbound, found := 0, false
	for _, s := range old {
		switch {
		case s.team == team:
			s.at, found = now, true
		case now.Sub(s.at) >= seenFor:
			continue
		}
		if p.teamTenant(s.team) == "" {
			unbound++
		}
		teams = append(teams, s)
	}
	switch {
	case !found && unbound >= maxUnboundTeams && p.teamTenant(team) == "":
		return
	case !found:
		teams = append(teams, sighting{team, now})
	}
	p.chanTeams.Add(channel, teams)
}

// channelTeams are the workspaces channel was seen in within seenFor
// (seenIn), in the order first recorded.
func (p *Platform) channelTeams(channel string) []string {
	seen, _ := p.chanTeams.Get(channel)
	teams := make([]string, 0, len(seen))
	now := p.clock.Now()
	for _, s := range seen {
		if now.Sub(s.at) < seenFor {
			teams = append(teams, s.team)
		}
	}
	return teams
}

// ChatTenant implements platform.Platform: a channel bound to a tenant is
// its; otherwise the tenant of a workspace the channel is in. A Slack
// Connect channel is in several workspaces, so it may belong to several
// tenants: the asking tenant (platform.WithTenant) is answered when it is
// one of them. Whatever the asker gets that is not its own costs the same
// (what a decline reveals, docs/security.md): the chat is looked up in the
// asker's workspaces (conversations.info, on its share of their budget)
// whether it is another tenant's, bound to one, or unknown, and that
// answer is remembered for the asker for declineMemory.
func (p *Platform) ChatTenant(ctx context.Context, chatID string) (string, error) {
	if !channelIDPattern.MatchString(chatID) {
		return "", platform.ErrUnknownChat
	}
	asker := platform.TenantOf(ctx)
	if t, _ := p.owners.Load().Owner(platform.Chat{ID: chatID}); t != "" {
		if t == asker {
			return t, nil
		}
		// The binding wins whatever the lookup says; it is made so that a
		// bound channel costs what any other decline does.
		if _, err := p.probeChannel(ctx, asker, chatID); err != nil {
			return "", err
		}
		return t, nil
	}
	owner := ""
	teams := p.channelTeams(chatID)
	for _, team := range teams {
		switch t := p.teamTenant(team); {
		case t == "":
		case t == asker:
			return t, nil
		case owner == "":
			owner = t
		}
	}
	team, err := p.probeChannel(ctx, asker, chatID)
	switch {
	case err != nil:
		return "", err
	case team != "":
		return asker, nil // also in one of the asker's workspaces (Slack Connect)
	case owner != "":
		return owner, nil
	}
	return "", platform.ErrUnknownChat
}

// probeChannel looks chat up in the workspaces bound to tenant and returns
// the first that has it ("" when none does). When it would have to ask
// Slack and ctx may not wait (platform.MayWait), it answers
// platform.ErrWouldWait at once, with no call, whosever chat is.
func (p *Platform) probeChannel(ctx context.Context, tenant, chat string) (string, error) {
	teams := p.teams.Load()
	if bound, ok := p.notFound.Get(tenant + "/" + chat); tenant == "" || ok && bound == weak.Make(teams) {
		return "", nil
	}
	var unreachable error
	for team, t := range *teams {
		if t != tenant {
			continue
		}
		if !platform.MayWait(ctx) { // Locate's first ask: another platform may place chat
			return "", platform.ErrWouldWait
		}
		found, err := p.channelIn(ctx, team, chat)
		switch {
		case err != nil:
			unreachable = err
		case found:
			return team, nil
		}
	}
	if unreachable == nil {
		p.notFound.Add(tenant+"/"+chat, weak.Make(teams))
	}
	return "", unreachable
}

// channelIn asks workspace team whether chat is one of its conversations
// the bot sees (conversations.info with its token, on the share of the
// tenant in ctx). The workspaces the answer names are recorded as the
// channel's (seenIn): its context team, a Slack Connect channel's host
// and other workspaces (shared_team_ids), an Enterprise Grid org-shared
// channel's workspaces of its org (internal_team_ids); an answer naming
// no id at all, the token's own (one naming its org alone, E..., says
// not which workspace: none). chat is team's when team is one of them:
// bot_token answers for a workspace that has no install of its own (an
// org-wide one, for every workspace of its org), so its answer alone
// never places a channel in the workspace asked. An error wraps
// platform.ErrUnavailable: Slack could not be asked.
func (p *Platform) channelIn(ctx context.Context, team, chat string) (bool, error) {
	var ch *slack.Channel
	err := p.call(ctx, team, "conversations.info", func(ctx context.Context, c *slack.Client) (err error) {
		ch, err = c.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: chat})
		return err
	})
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se), errors.Is(err, errNotInstalled):
		return false, nil
	case err != nil:
		return false, platform.UnavailableError("slack: the chat's owner could not be looked up; retry later")
	}
	in := slices.Concat([]string{ch.ContextTeamID, ch.ConversationHostID}, ch.SharedTeamIDs, ch.InternalTeamIDs)
	if !slices.ContainsFunc(in, func(id string) bool { return id != "" }) { // the workspace whose token answered
		_, tokens, _ := p.works.client(ctx, team)
		in = []string{tokens}
	}
	found := false
	for _, t := range in {
		if teamIDPattern.MatchString(t) {
			p.seenIn(chat, t)
			found = found || t == team
		}
	}
	return found, nil
}
