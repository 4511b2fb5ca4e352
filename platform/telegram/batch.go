package telegram

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-telegram/bot/models"

	"connector/platform"
)

// polledUpdate is one update of a getUpdates answer, normalized (prepare),
// waiting for the rest of its answer.
type polledUpdate struct {
	u        *models.Update
	in       inbound
	received time.Time
}

// inAnswer reports whether the current answer already holds update id (a
// repeat is dropped, as ingest drops one seen before).
func (p *Platform) inAnswer(id int64) bool {
	return slices.ContainsFunc(p.answer, func(pu polledUpdate) bool { return pu.u.ID == id })
}

// ingestAnswer ingests the updates of one getUpdates answer (up to 100)
// and returns once each is stored, dropped, or handed to ingestOne for a
// retry. Each update is made ready (routed, gated, its media re-hosted) in
// its chat's turn, different chats side by side and no lock held; then all
// of them go to the sink in one DeliverAll, which stores each tenant's
// deliveries in one store write, so a sequential source pays one commit
// (one fsync of the embedded store) per answer instead of one per update.
// An update counts as done for the offset (offsetGate) only once stored;
// one the sink refused is retried on its own (ingestOne), as is a press
// whose prompt's poster route could not look up, with its chat's later
// updates, which stay behind it. A sink that takes no batches gets each
// update through ingestOne.
func (p *Platform) ingestAnswer(ctx context.Context, answer []polledUpdate) {
	var bs platform.BatchSink
	if sink := p.sink.Load(); sink != nil {
		bs, _ = (*sink).(platform.BatchSink)
	}
	if bs == nil || len(answer) == 1 {
		for i := range answer {
			p.ingestOne(ctx, &answer[i])
		}
		return
	}
	// The deliveries are stored even when ctx ends meanwhile: a shutdown
	// waits for them (as ingestOne's do).
	dctx := context.WithoutCancel(ctx)
	ready := make([]readied, len(answer))
	var wg sync.WaitGroup
	for i := range answer {
		pu := &answer[i]
		wg.Add(1)
		p.turns.Go(ctx, pu.in.chatID, func() { // unbounded: never refused
			defer wg.Done()
			ready[i] = p.ready(dctx, pu.u, &pu.in, pu.received)
		})
	}
	wg.Wait()
	ds := make([]platform.Delivery, 0, len(answer))
	idx := make([]int, 0, len(answer))
	var held []int            // retried (route could not tell a press's poster), with its chat's later updates
	chats := map[int64]bool{} // the chats of held
	for i := range answer {
		switch chat := answer[i].in.chatID; {
		case ready[i].err != nil || ready[i].deliver && chats[chat]:
			held, chats[chat] = append(held, i), true
		case ready[i].deliver:
			ds = append(ds, ready[i].d)
			idx = append(idx, i)
		default:
			p.offsets.done(answer[i].u.ID)
		}
	}
	p.retry(ctx, answer, ready, held)
	if len(ds) == 0 {
		return
	}
	errs := bs.DeliverAll(dctx, ds)
	var failed []int
	for n, i := range idx {
		if errs != nil && errs[n] != nil {
			p.log.Warn("telegram update not delivered, retrying", "update_id", answer[i].u.ID, "err", errs[n])
			failed = append(failed, i)
			continue
		}
		p.delivered(answer[i].u, &answer[i].in, ready[i].d.Tenant)
		p.offsets.done(answer[i].u.ID)
	}
	p.retry(ctx, answer, ready, failed)
}

// retry hands the updates at is of answer, which ready readied, to
// ingestOne in order, once the context each took is back with its chat
// topic (the latest first, so that it stays in order).
func (p *Platform) retry(ctx context.Context, answer []polledUpdate, ready []readied, is []int) {
	for _, i := range slices.Backward(is) {
		p.observed.Restore(ready[i].observed.tenant, ready[i].observed.topic, answer[i].in.event.Context)
	}
	for _, i := range is {
		answer[i].in, _ = normalize(answer[i].u, p.mapping.Load()) // afresh: ready may have changed it
		p.ingestOne(ctx, &answer[i])
	}
}
