package discord

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/internal/loglimit"
	"connector/platform"
	"connector/platform/chatcontext"
	"connector/session"
)

// Run implements platform.Platform: it connects the Gateway and ingests
// until ctx ends (nil) or Discord refuses the bot (*RefusedError). It also
// runs the ingest workers, the command-manifest reconciler and, while it
// runs, interactions received on the webhook are delivered. Run may be
// called once.
func (p *Platform) Run(ctx context.Context, sink platform.Sink) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.lifeMu.Lock()
	if p.life != nil {
		p.lifeMu.Unlock()
		return errors.New("discord: Run called twice")
	}
	p.life = &lifecycle{ctx: ctx, sink: sink}
	p.lifeMu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.cmds.loop(ctx) })
	wg.Go(func() { p.links.Run(ctx) })
	p.setStatus(false, false, "connecting")
	if p.deps.Exclusive != nil {
		p.setStatus(true, false, "standby: the Gateway session runs on another instance; webhooks are served here")
	}
	err := p.deps.RunExclusive(ctx, "discord/gateway", func(ctx context.Context) error {
		// Chat owners come from the cache the Gateway fills, once this
		// session's snapshot has loaded: the cache lacks what changed while
		// another instance held the lease.
		p.snap.reset()
		p.gwHere.Store(true)
		defer p.gwHere.Store(false)
		return p.gw.run(ctx)
	})
	p.stop(cancel)
	wg.Wait()
	p.turns.Wait()
	if err == nil {
		p.setStatus(false, false, "stopped")
	}
	return err
}

// ingestMessage resolves the tenant from the message's own guild (or the DM
// rule), normalizes it under that tenant's knobs and delivers it; a reply
// quoting the bot's message says it is the tenant's own only when it is
// (platform.Grants.OwnQuote).
func (p *Platform) ingestMessage(ctx context.Context, it *ingestItem) {
	m := &it.msg
	if p.consumeLink(m, it.edit) {
		return
	}
	n, tenant, created, chat, drop := p.messageNormalizer(ctx, m)
	if drop != "" {
		p.routeDropped(drop, m.GuildID, m.ChannelID)
		return
	}
	t, err := n.message(platform.WithTenant(ctx, tenant), m, it.edit)
	ct := chatcontext.TenantOf(tenant, created)
	var d *dropError
	switch {
	case errors.As(err, &d) && d.seen != nil:
		p.channelContext.Keep(ct, m.ChannelID, *d.seen)
		p.dropped(err, "message_id", m.ID)
		return
	case err != nil:
		p.dropped(err, "message_id", m.ID)
		return
	}
	if q, rm := t.ev.ReplyTo, m.ReferencedMessage; q != nil && q.IsOwn {
		posted, _ := discordgo.SnowflakeTimestamp(rm.ID) // its whole millisecond
		// A thread's starter message is its parent channel's.
		q.IsOwn = p.spoke.OwnQuote(ctx, p.owners.Load(), chat, cmp.Or(rm.ChannelID, chat.ID), rm.ID, tenant, posted.Add(time.Millisecond-time.Microsecond))
	}
	if src := &t.ev.Source; src.AutoThreadCreated && !it.edit && src.ChatID != m.ChannelID {
		// The turn is keyed on the thread made of the message just now (not
		// one posted in a thread the connector made, nor an edit of a
		// thread's first message): a tenant granted the channel (route) is
		// granted the thread too, so it can answer there. A bound channel's
		// thread is its tenant's by the binding: no grant is looked up.
		if _, bound := p.owners.Load().Owner(p.chatOf(m.GuildID, m.ChannelID)); !bound {
			p.spoke.AddThread(ctx, m.ChannelID, src.ChatID, tenant)
		}
	}
	attached := p.attachContext(ct, m.ChannelID, t)
	// A Gateway event has no confirmation to withhold.
	if p.deliver(ctx, tenant, created, t, it.received) == nil && attached {
		p.channelContext.Delivered(ct, m.ChannelID)
	}
}

// routeDropped logs and counts an event route gave no tenant (drop). Its
// info line is written once a minute per guild or DM channel, and 10 at
// once then one every 10 s over all of them, with suppressed=<lines held
// back> (dropLogs); the metric counts every event.
func (p *Platform) routeDropped(drop, guildID, channelID string) {
	switch {
	case drop == platform.DropPrincipal:
		p.log.Debug("discord event dropped: the scope's principal does not admit its author", "channel_id", channelID)
		p.metrics.Dropped(platformName, drop)
	case guildID == "":
		p.dropLogs.Log(p.log, slog.LevelInfo, "dm/"+channelID, "discord DM dropped: no dm_tenant configured", "channel_id", channelID)
		p.metrics.Dropped(platformName, "dm_no_tenant")
	default:
		p.dropLogs.Log(p.log, slog.LevelInfo, "guild/"+guildID, "discord event dropped: no tenant claims its guild", "guild_id", guildID)
		p.metrics.Dropped(platformName, "unclaimed")
	}
}

// The rates and key bound of dropLogs.
var (
	dropLogRate     = loglimit.Rate{Burst: 1, Every: time.Minute}
	allDropsLogRate = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
)

const maxDropLogKeys = 1024

func (p *Platform) dropped(err error, attrs ...any) {
	reason := dropReason(err)
	p.metrics.Dropped(platformName, reason)
	p.log.Debug("discord event dropped", append(attrs, "reason", reason)...)
}

// deliver hands a normalized turn to the tenant's gateways, as created when
// it was routed (vault.Creation): an inbound event, or an interrupt of the
// session for /stop. It returns the sink's error: an interaction is
// confirmed to Discord only when the sink took it.
func (p *Platform) deliver(ctx context.Context, tenant string, created time.Time, t *turn, received time.Time) error {
	life := p.running()
	if life == nil {
		return errNotRunning
	}
	src := &t.ev.Source
	if src.ChatType == session.ChatTypeDM {
		// The DM channel is known as its author's from now on, even when
		// Discord could not be asked about it (normalization's stand-in):
		// the bot's own messages are never delivered, so in a DM with the
		// bot the author is the DM's user.
		p.cache.rememberDM(src.ChatID, src.UserID.Value)
	}
	d := platform.Delivery{Kind: platform.KindInbound, Tenant: tenant, Platform: platformName,
		SessionKey: p.key(tenant, src), ChatID: src.ChatID, Received: received, Event: &t.ev, Created: created}
	if t.interrupt {
		d.Kind, d.Event = platform.KindInterrupt, nil
	}
	if err := life.sink.Deliver(ctx, d); err != nil {
		p.log.Warn("discord delivery failed", "tenant", tenant, "chat_id", src.ChatID, "err", err)
		return err
	}
	return nil
}

// errNotRunning is deliver's error while Run is not running.
var errNotRunning = errors.New("discord: not running")
