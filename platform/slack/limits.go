package slack

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"connector/internal/clock"
	"connector/internal/ttlcache"
	"connector/platform"
	"connector/platform/fairshare"
	"connector/platform/pace"
)

// This file paces every Web API call within Slack's limits: each method
// has a tier, a budget per workspace (the one whose token makes the
// call; Tier 1 about 1 call per minute, Tier 2 20, Tier 3 50, Tier 4 100;
// chat.postMessage its own), shared between
// the tenants calling it in that workspace by weighted fair share
// (platform/fairshare), so one tenant's flood never delays another tenant,
// nor another workspace. Messages into one channel are also paced at
// channel_per_second (Slack allows about one per second per channel). A
// 429 pauses the method's budget in that workspace for its Retry-After,
// and the call is made again when the deadline allows: Slack did not take
// it. The channel pace is platform/pace's, as WhatsApp's per-user pace is.

// tier is a method's budget in one workspace.
type tier struct {
	perMinute float64
	burst     int
}

var (
	tier1    = tier{1, 1}
	tier2    = tier{20, 3}
	tier3    = tier{50, 5}
	tier4    = tier{100, 10}
	tierPost = tier{600, 20} // chat.postMessage: one per second per channel, several hundred per minute per workspace
)

// methodTiers are the tiers of the methods the connector calls; any other
// is Tier 3.
var methodTiers = map[string]tier{
	"auth.test":                    tier4,
	"users.info":                   tier4,
	"conversations.info":           tier3,
	"conversations.replies":        tier3,
	"conversations.open":           tier3,
	"chat.postMessage":             tierPost,
	"chat.postEphemeral":           tier4,
	"chat.update":                  tier3,
	"chat.delete":                  tier3,
	"chat.startStream":             tier4,
	"chat.appendStream":            tierPost,
	"chat.stopStream":              tier4,
	"reactions.add":                tier3,
	"reactions.remove":             tier2,
	"files.getUploadURLExternal":   tier4,
	"files.completeUploadExternal": tier4,
	"assistant.threads.setStatus":  tier4,
	"apps.connections.open":        tier1,
}

// channelPaced are the methods that post a message into a channel.
var channelPaced = map[string]bool{
	"chat.postMessage": true, "chat.postEphemeral": true, "files.completeUploadExternal": true, "chat.startStream": true,
}

// callMargin is kept free before a request's deadline for the call that
// follows a wait.
const callMargin = 500 * time.Millisecond

// Budgets are forgotten budgetIdle after their last call; at most
// budgetsSize are kept.
const (
	budgetIdle  = time.Hour
	budgetsSize = 100_000
)

// limits holds the budgets of every (workspace, method) and the pace of
// every channel.
type limits struct {
	p *Platform

	mu       sync.Mutex // one budget is made per key
	budgets  *ttlcache.Cache[budgetKey, *fairshare.Scheduler]
	channels *pace.Pacer // "<workspace>/<channel>"
}

type budgetKey struct{ team, method string }

// budget returns the scheduler of method in team.
func (l *limits) budget(team, method string) *fairshare.Scheduler {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := budgetKey{team, method}
	sched, ok := l.budgets.Get(k)
	if !ok {
		t, ok := methodTiers[method]
		if !ok {
			t = tier3
		}
		sched = fairshare.New(fairshare.Config{
			Rate: t.perMinute / 60, Burst: t.burst, Weights: fairshare.WeightsOf(l.p.cfg.Tenants, func(tc TenantConfig) int { return tc.Weight }), Clock: l.p.clock,
		})
	}
	l.budgets.Add(k, sched) // budgetIdle from this call
	return sched
}

// latestKey carries, in a context made by within, the instant on the
// platform's clock by which its waits for a budget end.
type latestKey struct{}

// within is ctx bounded by d on clk, as context.WithTimeout bounds it on
// the real clock: ended by clk, so the bound runs on the clock the budgets
// wait on (a test's fake clock too), and waits for a budget in it (callIn)
// end callMargin before it. An outer within's earlier bound holds.
func within(ctx context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	at := clk.Now().Add(d)
	if outer, ok := ctx.Value(latestKey{}).(time.Time); ok && outer.Before(at) {
		at = outer
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, latestKey{}, at))
	t := clk.AfterFunc(at.Sub(clk.Now()), cancel)
	return ctx, func() {
		t.Stop()
		cancel()
	}
}

// call makes one Web API call of method in workspace team with its
// client, on the share of the tenant in ctx (platform.TenantOf), within
// ctx's deadline.
func (p *Platform) call(ctx context.Context, team, method string, fn func(context.Context, *slack.Client) error) error {
	return p.callIn(ctx, team, "", method, fn)
}

// callIn is call for a call into channel: a method that posts a message
// there is also paced per channel, and once the call's turn comes it is
// made only while the action's tenant may still act in its chat
// (platform.StillMayAct).
// Only a 429 is retried (Slack did not take the call); any other error is
// returned as it is.
func (p *Platform) callIn(ctx context.Context, team, channel, method string, fn func(context.Context, *slack.Client) error) error {
	c, tokens, err := p.works.client(ctx, team)
	if err != nil {
		return err
	}
	tenant := platform.TenantOf(ctx)
	latest := platform.LatestStart(ctx, p.clock, p.cfg.RequestTimeout, callMargin)
	if at, ok := ctx.Value(latestKey{}).(time.Time); ok && at.Add(-callMargin).Before(latest) {
		latest = at.Add(-callMargin)
	}
	paced := channel != "" && channelPaced[method]
	chanKey := team + "/" + channel
	for {
		start := p.clock.Now()
		if paced {
			at, ok := p.limits.channels.Reserve(chanKey, start, latest)
			if !ok {
				return &platform.RateLimitedError{Wait: at.Sub(start)}
			}
			if err := p.clock.Sleep(ctx, at.Sub(p.clock.Now())); err != nil {
				return err
			}
		}
		sched := p.limits.budget(tokens, method)
		if err := platform.WaitShare(ctx, sched, tenant, latest, p.clock); err != nil {
			return err
		}
		if d := p.clock.Now().Sub(start); d > 0 {
			p.metrics.RateLimitWait(platformName, d)
		}
		if err := platform.StillMayAct(ctx); err != nil {
			return err
		}
		err := fn(ctx, c)
		var limited *slack.RateLimitedError
		if !errors.As(err, &limited) {
			if tokenRevoked(err) {
				p.works.forget(team)
			}
			return err
		}
		p.metrics.RateLimited(platformName)
		retry := max(limited.RetryAfter, time.Second)
		sched.Pause(retry)
		if paced {
			p.limits.channels.Hold(chanKey, p.clock.Now().Add(retry), p.clock.Now())
		}
		p.log.Info("slack 429; waiting Retry-After", "team", team, "method", method, "retry_after", retry)
		if p.clock.Now().Add(retry).After(latest) {
			return &platform.RateLimitedError{Wait: retry}
		}
	}
}

// tokenRevoked reports Slack's answers for a token that no longer works.
func tokenRevoked(err error) bool {
	switch slackErr(err) {
	case "invalid_auth", "token_revoked", "account_inactive", "not_authed", "token_expired":
		return true
	}
	return false
}
