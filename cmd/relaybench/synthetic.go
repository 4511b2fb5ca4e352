package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
	"connector/relay"
	"connector/session"
)

// syntheticPlatformName is the synthetic driver's platform on the wire.
const syntheticPlatformName = "synthetic"

// messageBody pads generated texts to a typical chat message.
const messageBody = " hey @bot can you summarize the thread above and list the open questions? thanks!"

// sessionsPerGateway is how many distinct sessions the synthetic driver
// rotates through per gateway of a tenant.
const sessionsPerGateway = 4

// syntheticPlatform publishes generated deliveries straight onto the sink
// the relay runs it with: no platform parsing, the relay alone. With more
// than one producer, events are published from that many goroutines at
// once, as concurrent webhooks would be, so a durable store can commit
// several in one write. With several relay instances it is run by each,
// and event seq goes to the (seq mod instances)th sink.
type syntheticPlatform struct {
	running   chan struct{} // closed once every instance runs it
	instances int
	sinksMu   sync.Mutex
	sinks     []platform.Sink // complete before running is closed
	tenants   []string
	sessions  [][]syntheticSession // per tenant
	text      []byte               // the single producer's buffer

	jobs      chan syntheticJob // nil with one producer
	producers sync.WaitGroup
	failed    atomic.Int64 // deliveries the sink refused
}

type syntheticJob struct {
	seq int
	at  time.Time
}

type syntheticSession struct {
	key    string
	source session.Source
}

// newSyntheticPlatform builds the platform for tenants, publishing from
// producers goroutines (see stop) to as many relay instances.
func newSyntheticPlatform(tenants []relay.Tenant, producers, instances int) *syntheticPlatform {
	key := relay.KeyFunc(tenants)
	p := &syntheticPlatform{running: make(chan struct{}), instances: instances, sessions: make([][]syntheticSession, len(tenants))}
	for ti, t := range tenants {
		p.tenants = append(p.tenants, t.ID)
		for s := range sessionsPerGateway * max(1, len(t.Gateways)) {
			src := session.Source{
				Platform: syntheticPlatformName, ChatID: "chat-" + t.ID + "-" + strconv.Itoa(s),
				ChatName: session.Str("general"), ChatType: session.ChatTypeGroup,
				UserID: session.Str("1000" + strconv.Itoa(s)), UserName: session.Str("alice"),
			}
			p.sessions[ti] = append(p.sessions[ti], syntheticSession{key: key(t.ID, &src), source: src})
		}
	}
	if producers > 1 {
		p.jobs = make(chan syntheticJob, producers)
		for range producers {
			p.producers.Go(p.produce)
		}
	}
	return p
}

// produce publishes the events queued by fire until stop.
func (p *syntheticPlatform) produce() {
	var text []byte
	for j := range p.jobs {
		<-p.running
		var d platform.Delivery
		d, text = p.delivery(j.seq, j.at, text)
		if p.sinks[j.seq%len(p.sinks)].Deliver(context.Background(), d) != nil {
			p.failed.Add(1)
		}
	}
}

// stop ends the producers once they have published every queued event.
func (p *syntheticPlatform) stop() {
	if p.jobs != nil {
		close(p.jobs)
		p.producers.Wait()
	}
}

// Name implements platform.Platform.
func (p *syntheticPlatform) Name() string { return syntheticPlatformName }

// Descriptor implements platform.Platform.
func (p *syntheticPlatform) Descriptor() descriptor.Descriptor {
	d := descriptor.Nexscope(nil, 4000)
	d.Platform, d.Label = syntheticPlatformName, syntheticPlatformName
	return d
}

// Run implements platform.Platform: it keeps the sink until ctx ends.
func (p *syntheticPlatform) Run(ctx context.Context, sink platform.Sink) error {
	p.sinksMu.Lock()
	p.sinks = append(p.sinks, sink)
	if len(p.sinks) == p.instances {
		close(p.running)
	}
	p.sinksMu.Unlock()
	<-ctx.Done()
	return nil
}

// ChatTenant implements platform.Platform: generated chats take no egress.
func (p *syntheticPlatform) ChatTenant(context.Context, string) (string, error) {
	return "", platform.ErrUnknownChat
}

// Execute implements platform.Platform.
func (p *syntheticPlatform) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.Failed(contract.CodeUnsupportedOp, "the synthetic platform sends nothing")
}

// Status implements platform.Platform.
func (p *syntheticPlatform) Status() platform.Status { return platform.Status{Ready: true} }

// delivery builds event seq, stamped at: tenants in turn, then each
// tenant's sessions in turn. It formats the text in buf and returns it for
// reuse.
func (p *syntheticPlatform) delivery(seq int, at time.Time, buf []byte) (platform.Delivery, []byte) {
	ti := seq % len(p.tenants)
	ss := p.sessions[ti]
	s := &ss[(seq/len(p.tenants))%len(ss)]
	buf = append(appendStamp(buf[:0], at), messageBody...)
	ev := &contract.Event{Text: string(buf), MessageType: contract.MessageText,
		MessageID: strconv.Itoa(seq), Source: s.source}
	return platform.Delivery{Kind: platform.KindInbound, Tenant: p.tenants[ti], Platform: syntheticPlatformName,
		SessionKey: s.key, ChatID: s.source.ChatID, Event: ev, Received: at}, buf
}

// fire publishes event seq, or queues it for the producers; the pacer
// calls it from one goroutine.
func (p *syntheticPlatform) fire(seq int, at time.Time) error {
	if p.jobs != nil {
		p.jobs <- syntheticJob{seq: seq, at: at}
		return nil
	}
	<-p.running
	var d platform.Delivery
	d, p.text = p.delivery(seq, at, p.text)
	return p.sinks[seq%len(p.sinks)].Deliver(context.Background(), d)
}

// failures implements eventDriver: deliveries the producers had refused.
func (p *syntheticPlatform) failures() int64 { return p.failed.Load() }
