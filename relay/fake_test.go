package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
)

// egress is one action a fakePlatform executed.
type egress struct {
	Tenant string
	Action contract.Action
}

// fakePlatform is a platform whose chats belong to fixed tenants and whose
// egress is recorded. Sends to a chat listed in block wait until that
// channel is closed, to model a slow platform call.
type fakePlatform struct {
	name  string
	ops   []string
	chats map[string]string // chat id -> tenant
	// down lists chats whose owner the platform cannot look up, as when its
	// API is unreachable: ChatTenant answers platform.ErrUnavailable.
	down map[string]bool
	// partial lists chats whose sends go out in part: the answer is
	// platform.SendParts' success whose error says the rest was not sent.
	partial map[string]bool

	mu    sync.Mutex
	sink  platform.Sink
	ready chan struct{}
	block map[string]chan struct{}

	egress  chan egress
	entered chan string // chat ids of actions Execute started
	// lookups counts ChatTenant's calls.
	lookups atomic.Int64
}

func newFake(name string, chats map[string]string) *fakePlatform {
	return &fakePlatform{
		name: name, chats: chats,
		ops:     []string{contract.OpSend, contract.OpEdit, contract.OpTyping, contract.OpFollowUp},
		ready:   make(chan struct{}),
		block:   make(map[string]chan struct{}),
		egress:  make(chan egress, 100),
		entered: make(chan string, 100),
	}
}

func (p *fakePlatform) Name() string { return p.name }

func (p *fakePlatform) Descriptor() descriptor.Descriptor {
	d := descriptor.Discord(p.ops)
	d.Platform, d.Label = p.name, p.name
	return d
}

func (p *fakePlatform) Run(ctx context.Context, sink platform.Sink) error {
	p.mu.Lock()
	p.sink = sink
	p.mu.Unlock()
	close(p.ready)
	<-ctx.Done()
	return nil
}

func (p *fakePlatform) ChatTenant(_ context.Context, chatID string) (string, error) {
	p.lookups.Add(1)
	if p.down[chatID] {
		return "", fmt.Errorf("%w: dial tcp 10.1.2.3:443: connect: connection refused", platform.ErrUnavailable)
	}
	if t, ok := p.chats[chatID]; ok {
		return t, nil
	}
	return "", platform.ErrUnknownChat
}

// Execute runs every op of p.ops through platform.Execute, as the real
// platforms do; any chat_id is well-formed.
func (p *fakePlatform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	e := platform.Egress[*fakePlatform, string]{
		Ops:  platform.Ops[*fakePlatform, string]{},
		Chat: func(_ *fakePlatform, chatID string) (string, bool) { return chatID, true },
	}
	for _, op := range p.ops {
		e.Ops[op] = (*fakePlatform).act
	}
	return platform.Execute(ctx, &e, p, tenant, a)
}

// act records an action Execute let through, after the wait slowChat set.
func (p *fakePlatform) act(ctx context.Context, tenant, _ string, a *contract.Action) contract.Result {
	select {
	case p.entered <- string(a.ChatID):
	default: // nobody is watching
	}
	p.mu.Lock()
	wait := p.block[string(a.ChatID)]
	p.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return contract.Failed(contract.CodeUnavailable, "timed out")
		}
	}
	p.egress <- egress{Tenant: tenant, Action: *a}
	r := contract.OK("m-" + string(a.ChatID))
	if p.partial[string(a.ChatID)] {
		r.Error = "fake send: refused (sent 1 of 2 parts; the rest was not sent)"
	}
	return r
}

func (p *fakePlatform) Status() platform.Status { return platform.Status{Ready: true} }

// slowChat makes sends to chatID wait until the returned func is called.
func (p *fakePlatform) slowChat(chatID string) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.block[chatID] = ch
	p.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

// runningSink waits for Run to hand the platform its sink. The helpers
// that publish take no testing.T, so a Run that never starts panics.
func (p *fakePlatform) runningSink() platform.Sink {
	select {
	case <-p.ready:
	case <-time.After(10 * time.Second):
		panic("fakePlatform: timed out after 10s waiting for Run to start")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sink
}

// deliver publishes an inbound message from chat for tenant.
func (p *fakePlatform) deliver(tenant, chatID, userID, text string) {
	p.deliverAt(tenant, chatID, userID, text, time.Now())
}

// deliverAt is deliver of an event received at at.
func (p *fakePlatform) deliverAt(tenant, chatID, userID, text string, at time.Time) {
	p.deliverUnder(tenant, time.Time{}, chatID, userID, text, at)
}

// deliverUnder is deliverAt of an event routed to tenant as created at
// created (platform.Delivery.Created; zero: not known).
func (p *fakePlatform) deliverUnder(tenant string, created time.Time, chatID, userID, text string, at time.Time) {
	sink := p.runningSink()
	ev := &contract.Event{Text: text, MessageID: "msg-" + text}
	ev.Source.Platform = p.name
	ev.Source.ChatID = chatID
	ev.Source.ChatType = "group"
	ev.Source.UserID.Value, ev.Source.UserID.Valid = userID, true
	_ = sink.Deliver(context.Background(), platform.Delivery{
		Kind: platform.KindInbound, Tenant: tenant, Platform: p.name,
		SessionKey: sessionKey(p.name, chatID, userID), ChatID: chatID, Event: ev, Received: at, Created: created,
	})
}

// interrupt publishes a platform-side /stop for a session.
func (p *fakePlatform) interrupt(tenant, chatID, userID string) {
	p.interruptUnder(tenant, time.Time{}, chatID, userID)
}

// interruptUnder is interrupt routed to tenant as created at created
// (platform.Delivery.Created; zero: not known).
func (p *fakePlatform) interruptUnder(tenant string, created time.Time, chatID, userID string) {
	_ = p.runningSink().Deliver(context.Background(), platform.Delivery{
		Kind: platform.KindInterrupt, Tenant: tenant, Platform: p.name,
		SessionKey: sessionKey(p.name, chatID, userID), ChatID: chatID, Created: created,
	})
}

func sessionKey(platform, chatID, userID string) string {
	return "agent:main:" + platform + ":group:" + chatID + ":" + userID
}

// nextEgress waits for the platform's next executed action.
func (p *fakePlatform) nextEgress(t interface {
	Helper()
	Fatalf(string, ...any)
}) egress {
	t.Helper()
	select {
	case e := <-p.egress:
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no egress on %s", p.name)
	}
	return egress{}
}

// publish puts d on the platform's sink.
func (p *fakePlatform) publish(d platform.Delivery) {
	_ = p.runningSink().Deliver(context.Background(), d)
}

// nextEntered waits until Execute started on another action.
func (p *fakePlatform) nextEntered(t interface {
	Helper()
	Fatalf(string, ...any)
}) string {
	t.Helper()
	select {
	case c := <-p.entered:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no action reached %s", p.name)
	}
	return ""
}
