// Package platform defines what a chat platform plugs into the connector:
// ingest that normalizes platform events into tenant-scoped deliveries, a
// descriptor, tenant resolution from the platform's own ids, and egress that
// executes the gateway's outbound actions.
//
// Implementations live in platform/discord, platform/telegram and
// platform/nexscope. They never import the relay: deliveries go into a Sink
// (the relay's bus), actions come in through Execute.
package platform

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/media"
	"connector/session"
	"connector/store"
	"connector/vault"
)

// Platform is one chat platform fronted by the connector.
type Platform interface {
	// Name is the platform value used on the wire ("discord", "telegram", …).
	Name() string
	// Descriptor is answered to a gateway hello for this platform. Its
	// SupportedOps come from the egress handler table.
	Descriptor() descriptor.Descriptor
	// Run ingests platform events into sink until ctx is done. It returns nil
	// after ctx is cancelled, and an error only when ingest cannot go on
	// (e.g. the platform refused the credentials).
	Run(ctx context.Context, sink Sink) error
	// ChatTenant resolves the tenant that owns chatID by binding (rule 1 of
	// the ownership order, Ownership.Owner: its Discord guild, Telegram
	// chat, nexscope room), or by the platform's fallback (Discord's
	// dm_tenant for a DM channel); claims and grants are ChatGranter's. It
	// returns ErrUnknownChat when no tenant owns the chat, and an error
	// wrapping ErrUnavailable when it cannot tell because the platform is
	// unreachable. The caller names the asking tenant in ctx (WithTenant): a
	// platform that has to ask the network charges the call to it. One that
	// would wait to answer answers ErrWouldWait at once instead when ctx
	// may not wait (MayWait).
	ChatTenant(ctx context.Context, chatID string) (string, error)
	// Execute performs one outbound action for tenant through
	// platform.Execute and the platform's Egress, which check the action's
	// target, the op (Unsupported), a chat-addressed op's chat id and chat
	// (Authorize) in the one order every platform answers by. It honours
	// ctx's deadline (the gateway waits 30 s) and never returns secrets in
	// the result.
	Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result
	// Status reports readiness for /readyz.
	Status() Status
}

// ErrUnknownChat is returned by ChatTenant when no tenant claims a chat.
var ErrUnknownChat = errors.New("no tenant claims this chat")

// ErrUnavailable is wrapped by ChatTenant's error when the chat's owner
// cannot be looked up because the platform is unreachable (connection
// refused, DNS failure, server errors, timeouts). Such an action is
// answered with the retryable code unavailable (OwnerUnknown), never with
// the decline the gateway treats as final.
var ErrUnavailable = errors.New("platform unreachable")

// Status is a platform's readiness.
type Status struct {
	Ready bool `json:"ready"`
	// Detail says why not (or what it is connected as); never a secret.
	Detail string `json:"detail,omitempty"`
	// Terminal is true when the platform gave up for good (bad token,
	// disallowed intents) and will not recover without a config change.
	Terminal bool `json:"terminal,omitempty"`
}

// Routes is implemented by platforms that serve HTTP endpoints on the
// connector's listener (webhooks, the nexscope WebSocket).
type Routes interface {
	// Routes maps a net/http ServeMux pattern to its handler.
	Routes() map[string]http.Handler
}

// HelloObserver is implemented by platforms that act on a gateway's hello,
// such as Discord reconciling the gateway's slash-command manifest. It must
// return quickly and never fail the handshake. created is the tenant's
// creation as the relay served the hello (relay.Tenant.Created), which the
// relay learns before the platforms do.
type HelloObserver interface {
	ObserveHello(tenant string, created time.Time, gatewayID string, hello *contract.GatewayFrame)
}

// Kind says what a Delivery carries.
type Kind uint8

// Delivery kinds.
const (
	// KindInbound carries a normalized MessageEvent.
	KindInbound Kind = iota + 1
	// KindInterrupt asks the owner of SessionKey to stop its turn (a
	// platform-side /stop).
	KindInterrupt
	// KindPassthrough carries a sanitized platform request for the gateway's
	// passthrough handler.
	KindPassthrough
)

// Delivery is one normalized, tenant-scoped item for the tenant's gateways.
type Delivery struct {
	Kind     Kind
	Tenant   string
	Platform string
	// SessionKey is the key the tenant's gateway computes for this event's
	// source (KeyFunc); the relay routes by it.
	SessionKey string
	// ChatID is the chat the delivery belongs to (interrupt_inbound carries it).
	ChatID string
	// GatewayID is the gateway an interrupt came from; empty for a
	// platform-side /stop.
	GatewayID string
	// Event is set for KindInbound.
	Event *contract.Event
	// Forward is set for KindPassthrough.
	Forward *contract.Forward
	// Received is when the platform event reached the connector.
	Received time.Time
	// Created is the tenant's creation the platform routed the delivery
	// under (vault.Creation when it chose the tenant): the relay takes in
	// no delivery routed under an earlier tenant of the id, deleted and
	// created again since, and keeps one routed under a later creation
	// than it has applied for that tenant alone (an interrupt routed under
	// another creation is dropped). Zero when not known: the relay takes it
	// for the tenant's current creation.
	Created time.Time
}

// Sink accepts deliveries. The relay's bus implements it.
type Sink interface {
	// Deliver hands d to the tenant's gateways (or their buffer). It does not
	// block on sockets.
	Deliver(ctx context.Context, d Delivery) error
}

// BatchSink is a Sink that also takes a batch of deliveries from one
// source at once (a Telegram getUpdates answer), so that the batch is made
// durable in one store commit instead of one commit per delivery. The
// relay implements it.
type BatchSink interface {
	Sink
	// DeliverAll hands each of ds to its tenant's gateways as Deliver
	// would, keeping their order, and returns once every one is stored:
	// all of a tenant's inbound and passthrough deliveries in one store
	// write, the tenants' writes side by side (sharing the store's group
	// commit). errs is nil when every delivery was taken; otherwise
	// errs[i] is nil for a delivery taken and the error of one not taken,
	// which the source must deliver again.
	DeliverAll(ctx context.Context, ds []Delivery) (errs []error)
}

// KeyFunc computes the session key a tenant's gateway would compute for src,
// with that tenant's gateway knobs.
type KeyFunc func(tenant string, src *session.Source) string

// Metrics receives the platform-side measurements the connector exports.
// Implementations must be safe for concurrent use and cheap.
type Metrics interface {
	// RateLimitWait records time an egress call spent waiting for budget.
	RateLimitWait(platform string, d time.Duration)
	// RateLimited counts a 429 answered by the platform.
	RateLimited(platform string)
	// Dropped counts an ingested event that was not delivered, by reason
	// ("unclaimed", "duplicate", "gated", "malformed", …).
	Dropped(platform, reason string)
}

// NopMetrics discards everything.
type NopMetrics struct{}

// RateLimitWait implements Metrics.
func (NopMetrics) RateLimitWait(string, time.Duration) {}

// RateLimited implements Metrics.
func (NopMetrics) RateLimited(string) {}

// Dropped implements Metrics.
func (NopMetrics) Dropped(string, string) {}

// Deps are the shared services a platform is built with.
type Deps struct {
	Log   *slog.Logger
	Vault vault.Store
	Key   KeyFunc
	// Metrics may be nil (NopMetrics).
	Metrics Metrics
	// Clock is the time source of timestamps, rate limits and backoffs;
	// nil means clock.System. Tests set a clocktest.Fake.
	Clock clock.Clock
	// Exclusive runs run while this instance holds the named lease, so
	// that of several instances only one runs it (a Discord Gateway
	// session, a Telegram long poll), and returns when ctx ends; nil runs
	// run at once (a single instance).
	Exclusive func(ctx context.Context, name string, run func(context.Context) error) error
	// Media stores attachments by reference: send_media resolves its
	// source_url there, and inbound attachments behind the platform's
	// credential are re-hosted there. Nil: send_media answers unavailable
	// and inbound attachments reach gateways as their caption only.
	Media *media.Store
	// Cluster is set when several instances share the store (backend
	// redis), together with Exclusive: how a platform whose state lives in
	// one process (nexscope rooms) reaches the other instances (package
	// internal/cluster). Nil for a single instance.
	Cluster *cluster.Node
	// Linker redeems "/link <code>" DMs (authors.go); nil leaves such DMs
	// to normal routing.
	Linker Linker
	// Store is the durable store every instance shares. A platform keeps
	// there, under its own names, what every instance sharing the store and
	// the next start must know too (Slack: the workspaces installed through
	// OAuth, its event dedupe; WhatsApp: its dedupe; Telegram: the names of
	// the forum topics the connector created or renamed). Nil: such state
	// lives in the platform's memory.
	Store store.Store
}

// RunExclusive runs run under d.Exclusive, or at once when it is nil.
func (d *Deps) RunExclusive(ctx context.Context, name string, run func(context.Context) error) error {
	if d.Exclusive == nil {
		return run(ctx)
	}
	return d.Exclusive(ctx, name, run)
}

// RetryStart runs try, a platform's start-up call, each time within
// timeout, until it succeeds or ctx ends (nil), or until failed, told of
// each other failure and of the wait on clk before the next try (from
// backoffMin, doubling up to backoffMax), ends it with an error.
func RetryStart(ctx context.Context, clk clock.Clock, timeout, backoffMin, backoffMax time.Duration, try func(context.Context) error, failed func(err error, retryIn time.Duration) error) error {
	for backoff := backoffMin; ; backoff = min(backoff*2, backoffMax) {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		err := try(tctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if err := failed(err, backoff); err != nil || clk.Sleep(ctx, backoff) != nil {
			return err
		}
	}
}

// WithDefaults returns d with what is unset filled in: a discarding Log,
// the default session Key (session.DefaultOptions), NopMetrics and
// clock.System. Every platform's New starts from it, so each default is
// stated here alone.
func (d Deps) WithDefaults() Deps {
	d.Log = cmp.Or(d.Log, slog.New(slog.DiscardHandler))
	if d.Key == nil {
		d.Key = func(_ string, src *session.Source) string { return session.Key(src, session.DefaultOptions) }
	}
	d.Metrics = cmp.Or[Metrics](d.Metrics, NopMetrics{})
	d.Clock = cmp.Or(d.Clock, clock.System)
	return d
}

// Outcome is what a conformance case (session.CheckOutcomes) reads of ev,
// the event a platform's fixture normalizer built: its source and the
// fields a fixture's event names, an empty id being absent.
func Outcome(ev *contract.Event) session.Outcome {
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return session.Outcome{Source: ev.Source, Event: &session.EventFields{
		Text: ev.Text, MessageType: ev.MessageType, MessageID: opt(ev.MessageID), ReplyToMessageID: opt(ev.ReplyToMessageID),
	}}
}
