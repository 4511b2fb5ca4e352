package platform

import (
	"context"
	"sync"
	"time"

	"connector/internal/clock"
	"connector/internal/keyrate"
)

// LinkDesk handles the "/link <code>" DMs (authors.go) apart from
// delivery, so that users sending them, many or often, cost the tenants'
// deliveries nothing (issue 22: 60 users sending 737 /link DMs raised
// another tenant's Telegram webhook latency from 20 ms to 914 ms, each
// redemption and paced reply holding up the updates behind it):
//
//   - a platform's ingest only parses the DM and submits it, never
//     waiting: the redemption (a store round trip) and the reply (paced
//     like any message to the DM) run on the desk's own workers, from its
//     own bounded queue;
//   - each user (platform user id) submits at most LinkBurst DMs at once
//     and then one per LinkEvery; beyond that, and when the queue is full,
//     the DM is consumed unanswered and counted;
//   - the replies spend the platform budget of LinkBudget, a fair-share
//     name of their own, so under contention they take one tenant's share
//     of the bot's budget, never another tenant's.
//
// The limits are per instance: with several instances behind one webhook
// address, a user's allowance is per instance that receives its DMs.
type LinkDesk struct {
	users *keyrate.Limiter
	queue chan func(context.Context)
}

// Bounds of the LinkDesk.
const (
	// LinkBurst DMs of one user are taken at once, then one per LinkEvery.
	LinkBurst = 3
	LinkEvery = 20 * time.Second
	// LinkQueue bounds the DMs waiting for a worker, LinkWorkers the DMs
	// handled at once.
	LinkQueue   = 256
	LinkWorkers = 4
	// linkUsers bounds the users whose allowance is remembered.
	linkUsers = 10_000
)

// LinkBudget is the name link replies are charged to in a platform's
// fair share of the bot's budget (fairshare.Scheduler): it is no tenant's
// id (tenant ids do not start with a NUL byte).
const LinkBudget = "\x00link"

// Reasons a LinkDesk gives for a DM it did not take, counted as the
// platform's dropped updates.
const (
	DropLinkRateLimited = "link_rate_limited"
	DropLinkShed        = "link_shed"
)

// NewLinkDesk returns a desk on the clock c; Run runs its workers.
func NewLinkDesk(c clock.Clock) *LinkDesk {
	return &LinkDesk{
		users: keyrate.New(keyrate.Config{Burst: LinkBurst, Every: LinkEvery, MaxKeys: linkUsers, Clock: c}),
		queue: make(chan func(context.Context), LinkQueue),
	}
}

// Submit queues redeem, the redemption of a /link DM of user and its
// reply, without waiting. It returns "" when the DM was queued, else the
// reason it was not (DropLinkRateLimited, DropLinkShed): the DM is then
// consumed unanswered.
func (d *LinkDesk) Submit(user string, redeem func(context.Context)) (dropReason string) {
	if ok, _ := d.users.Allow(user); !ok {
		return DropLinkRateLimited
	}
	select {
	case d.queue <- redeem:
		return ""
	default:
		return DropLinkShed
	}
}

// Run handles queued DMs on LinkWorkers workers until ctx ends; DMs still
// queued then are left unanswered.
func (d *LinkDesk) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range LinkWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case redeem := <-d.queue:
					redeem(ctx)
				}
			}
		})
	}
	wg.Wait()
}
