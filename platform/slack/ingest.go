package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/vault"
)

// This file ingests what Slack sends, whatever carried it (the HTTP
// routes of events.go, Socket Mode): messages, slash commands, prompt
// presses, and the uninstall events. Each returns nil once the event is
// stored (Sink.Deliver returned) or deliberately dropped, platform.ErrBusy when
// another instance is handling its copy, and another error when it could
// not be stored: the source must send it again.

// errNotRunning answers events that arrive while Run is not running.
var errNotRunning = errors.New("slack: not running")

// envelopeJob reads an event_callback envelope into the job that handles
// it, and the chat whose order a message's job runs in ("" for any other
// event), with the tenant the message (a reaction, by its reactor) routes
// to by the ownership order alone (routedTo; "" when none, or for any
// other event), which an intake entry of it is charged to. slow is the dedupe key of a message whose
// handling may outlast Slack's 3 s (it has files to fetch, or is a thread
// reply, whose thread's context and root images may be fetched) and that
// a tenant takes, "" for any other event; it is judged only when arriving
// (a route's request, which the intake may store): an intake entry's
// replay, which the intake took as slow, leaves the tenant's settings to
// normalize alone.
func (p *Platform) envelopeJob(env *envelope, received time.Time, arriving bool) (chat, tenant, slow string, job func(context.Context) error) {
	// running refuses job while Run is not running.
	running := func(job func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			if p.sink.Load() == nil {
				return errNotRunning
			}
			return job(ctx)
		}
	}
	done := func(reason string) (string, string, string, func(context.Context) error) {
		return "", "", "", running(func(context.Context) error {
			p.drop(reason, env.EventID)
			return nil
		})
	}
	var ev wireEvent
	if env.InnerEvent == nil || json.Unmarshal(*env.InnerEvent, &ev) != nil {
		return done(dropMalformed)
	}
	switch ev.Type {
	case "app_uninstalled", "tokens_revoked":
		return "", "", "", func(ctx context.Context) error { return p.uninstalled(ctx, env, &ev) }
	case "reaction_added", "reaction_removed":
		if ev.Item == nil || ev.Item.Channel == "" {
			return done(dropMalformed)
		}
		team := env.installTeam()
		p.seenIn(ev.Item.Channel, team)
		r, _ := p.owners.Load().Route(ev.User, chatOf(ev.Item.Channel, team)) // as ingestReaction routes it
		return team + "/" + ev.Item.Channel, r.Tenant, "", running(func(ctx context.Context) error { return p.ingestReaction(ctx, env, &ev, received) })
	case "app_home_opened", "app_context_changed", "assistant_thread_started", "assistant_thread_context_changed":
		return done(dropLifecycle)
	case "message", "app_mention":
	default:
		return done(dropUnsupported)
	}
	m, ok := newMessage(env, &ev)
	if !ok || m.ev.Channel == "" || m.dedupeKey == "" || m.install == "" {
		return done(dropMalformed)
	}
	p.seenIn(m.ev.Channel, m.install)
	tenant, owner := p.routedTo(&m)
	// The settings are read only for a message that may be slow: every
	// other one is handled in the reader's (or request's) goroutine, and
	// normalize reads them there.
	if arriving && p.intake != nil && (len(m.ev.Files) > 0 || m.ev.ThreadTS != "" && m.ev.ThreadTS != m.ev.TS) && !ownOrDeleted(&m, env) &&
		tenant != "" && !settingsDrop(&m, p.policy(tenant), owner) {
		slow = "msg/" + m.liveDedupeKey()
	}
	return m.install + "/" + m.ev.Channel, tenant, slow, running(func(ctx context.Context) error { return p.ingestMessage(ctx, env, &m, received) })
}

// ownOrDeleted reports whether m is a deletion or the bot's own message
// (a bot's, posted by the user the envelope authorizes as the bot), which
// normalize drops whatever the tenant's settings: Slack sends the bot's
// posts in a thread, and each edit of its drafts there, back as events,
// and none is worth an intake entry. It asks nothing: a message it misses
// only takes one, and the rare own message normalize keeps (a Slack
// Connect channel whose event names another workspace's bot) has its
// thread read before its 200, as every thread reply did before the intake
// took them.
func ownOrDeleted(m *message, env *envelope) bool {
	bot := env.botUser()
	return m.ev.Subtype == "message_deleted" || m.ev.BotID != "" && bot != "" && m.ev.User == bot
}

// routedTo is the tenant m routes to by the ownership order alone (no
// grant recorded; "" when none), and whether its author is linked to it.
// A slow message it routes nowhere, or whose settings drop it
// (settingsDrop), is not worth an intake entry.
func (p *Platform) routedTo(m *message) (tenant string, owner bool) {
	chat := chatOf(m.ev.Channel, m.install)
	chat.DM = isDM(m.ev)
	r, ok := p.owners.Load().Route(m.ev.User, chat)
	if !ok || r.Drop != "" {
		return "", false
	}
	return r.Tenant, r.Owner
}

// settingsDrop reports whether pol, the settings of the tenant m is routed
// to (owner: its author linked to it), drop m by themselves, with no marker
// read and no Slack lookup (normalizer.run decides, with them): an ignored
// channel, or, outside a 1:1 DM, a message mentioning nobody where
// strict_mention, or thread_require_mention for a thread reply, asks for a
// mention, or, for one in no thread, require_mention. Such a message is
// handled before its 200 as a fast one (its drop fetches nothing), rather
// than stored in the intake; one it misses only takes an entry.
func settingsDrop(m *message, pol *policy, owner bool) bool {
	ev := m.ev
	if pol.ignoreAll || pol.ignored[ev.Channel] {
		return true
	}
	if owner || isDM(ev) {
		return false
	}
	routing := mentionText(ev.Text, decodeBlocks(ev.Blocks))
	if strings.Contains(routing, "<@") || pol.mentionPattern(routing) {
		return false
	}
	free := !pol.requireMentionIn[ev.Channel] && (pol.freeResponse[ev.Channel] || !pol.requireMention)
	reply := ev.ThreadTS != "" && ev.ThreadTS != ev.TS
	return !free && (pol.strictMention || ev.ThreadTS == "") || pol.threadRequireMention && reply
}

// intakes reports whether a request of chat goes to the durable intake:
// a slow message (once, its dedupe key, set), or any request of a chat
// with an entry pending here.
func (p *Platform) intakes(chat, once string) bool {
	return p.intake != nil && (once != "" || p.intake.waiting(chat))
}

// isDM reports whether ev was posted in a 1:1 DM.
func isDM(ev *wireEvent) bool {
	return ev.ChannelType == "im" || (ev.ChannelType == "" && strings.HasPrefix(ev.Channel, "D"))
}

// inChatOrder runs job in chat's turn (platform/chatorder: one job of a
// chat at a time, in arrival order, chats side by side) in the caller's
// goroutine. A job that started runs to its end even when the request
// that queued it is gone; one still waiting for its turn when ctx ends
// does not run. An HTTP request (withIntake) that is a slow message, or
// of a chat with an intake entry pending here, is stored in the intake
// instead (intake.go), charged to tenant ("": chat's holder), and job runs
// from there; an intake entry's job runs at once: it holds its chat's
// turn.
func (p *Platform) inChatOrder(ctx context.Context, chat, tenant string, job func(context.Context) error) error {
	if ctx.Value(inTurnKey{}) != nil {
		return job(ctx)
	}
	if r, _ := ctx.Value(intakeRequestKey{}).(*intakeRequest); r != nil && p.intakes(chat, r.once) {
		return p.admit(ctx, chat, tenant, r)
	}
	return p.queues.Do(ctx, chat, func() error { return job(context.WithoutCancel(ctx)) })
}

// ingestMessage is one message's pipeline: the /link DM or routing, then
// dedupe (team, channel and ts, across instances), the edit guard, the
// tenant's gates, the files, delivery. A message no tenant takes is
// dropped before its dedupe: an installed workspace or channel nobody
// claims costs the store no write, whatever the rate Slack sends at.
func (p *Platform) ingestMessage(ctx context.Context, env *envelope, m *message, received time.Time) error {
	ev := m.ev
	dm := isDM(ev)
	code, link := linkCommand(ev.Text)
	link = link && dm && !m.edit && p.deps.Linker != nil && !declaredBot(ev, p.defPol) && ev.User != ""
	r := m.routed
	if r == nil && !link {
		tenant, created, owner, drop := p.route(ctx, ev.User, ev.Channel, m.install, dm)
		if drop != "" {
			p.drop(drop, env.EventID)
			return nil
		}
		r = &routing{tenant: tenant, created: created, owner: owner}
	}
	return p.once(ctx, "msg/"+m.liveDedupeKey(), env.EventID, func() error {
		if m.edit {
			switch done, err := p.memory.has(ctx, markTurn, turnMark(m.scope, ev.Channel, ev.TS)); {
			case err != nil:
				return fmt.Errorf("slack: read the message's turn marker: %w", err)
			case done:
				p.drop(dropEditOfProcessed, env.EventID)
				return nil
			}
		}
		if link {
			team, channel := m.install, ev.Channel
			p.submitLink(team, ev.User, channel, code, func(ctx context.Context, reply string) { p.replyLink(ctx, team, channel, reply) })
			return nil
		}
		tenant, owner := r.tenant, r.owner
		bot, _ := p.works.botUser(ctx, m.scope)
		if bot == "" {
			bot, _ = p.works.botUser(ctx, m.install)
			bot = cmp.Or(bot, env.botUser())
		}
		n := &normalizer{tenant: tenant, pol: p.policy(tenant), look: p.names, state: p.memory, bot: bot, owner: owner, clock: p.clock, warn: p.markerNotKept}
		tctx := platform.WithTenant(ctx, tenant)
		t, drop, err := n.normalize(tctx, m)
		if err != nil {
			return fmt.Errorf("slack: read the thread's markers: %w", err)
		}
		if drop != "" {
			p.drop(drop, env.EventID)
			return nil
		}
		if ev.ThreadTS != "" && ev.ThreadTS != ev.TS {
			t.ev.Context, t.rootFiles = p.threadContext(tctx, tenant, m, ev.ThreadTS, bot)
		}
		p.attachFiles(tctx, tenant, m.install, t)
		if err := ctx.Err(); err != nil {
			// A shutdown cut the fetches short: never delivered without
			// what it lost; its source sends it again (or the intake
			// keeps it).
			return fmt.Errorf("slack: the message's files and thread were not all fetched: %w", err)
		}
		if err := p.deliver(ctx, tenant, r.created, &t.ev, received); err != nil {
			return err
		}
		p.rehostsDelivered(tenant, t)
		p.markerNotKept(p.memory.turnStarted(ctx, tenant, m.scope, ev.Channel, ev.TS, t.thread))
		return nil
	})
}

// markerNotKept logs a marker the store did not keep (memory.go): what it
// would have decided later (an edit's turn, an unmentioned reply's wake)
// is decided without it.
func (p *Platform) markerNotKept(err error) {
	if err != nil {
		p.log.Warn("slack thread marker not stored", "err", err)
	}
}

// deliver hands an inbound event of tenant, as created when it was routed
// (vault.Creation), to the sink.
func (p *Platform) deliver(ctx context.Context, tenant string, created time.Time, ev *contract.Event, received time.Time) error {
	sink := p.sink.Load()
	if sink == nil {
		return errNotRunning
	}
	d := platform.Delivery{
		Kind: platform.KindInbound, Tenant: tenant, Platform: platformName,
		SessionKey: p.deps.Key(tenant, &ev.Source), ChatID: ev.Source.ChatID, Event: ev, Received: received,
		Created: created,
	}
	if err := p.deliveringTo(ctx, d.ChatID); err != nil {
		return err
	}
	if err := (*sink).Deliver(ctx, d); err != nil {
		return fmt.Errorf("slack: deliver: %w", err)
	}
	p.delivered(ctx)
	return nil
}

// drop counts and logs an event that is not delivered.
func (p *Platform) drop(reason, eventID string) {
	p.metrics.Dropped(platformName, reason)
	p.log.Debug("slack event dropped", "reason", reason, "event_id", eventID)
}

// uninstalled forgets a workspace's install when Slack says the app was
// uninstalled or its bot token revoked. An install stored after the event
// happened (its event_time: Slack retries an event it got no 200 for, for
// minutes, the same envelope) is a newer one, and is kept. Both times are
// whole seconds, so one stored in the event's second cannot be told from
// it: it is kept too, since a revoked token left in place is refused at
// its first use, while a new install forgotten is lost without a word.
func (p *Platform) uninstalled(ctx context.Context, env *envelope, ev *wireEvent) error {
	team := env.installTeam()
	if ev.Type == "tokens_revoked" && (ev.Tokens == nil || len(ev.Tokens.Bot) == 0) {
		p.drop(dropUnsupported, env.EventID) // only user tokens were revoked
		return nil
	}
	switch rec, found, err := p.works.load(ctx, team); {
	case err != nil:
		return fmt.Errorf("slack: read the install of %s: %w", team, err)
	case found && env.EventTime > 0 && rec.Installed >= int64(env.EventTime):
		p.drop(dropStaleUninstall, env.EventID)
		p.log.Info("slack workspace install kept: installed after the event", "team", team, "event", ev.Type)
		return nil
	}
	removed, err := p.works.remove(ctx, team)
	if err != nil {
		return fmt.Errorf("slack: forget the install of %s: %w", team, err)
	}
	p.metrics.Dropped(platformName, ev.Type)
	p.log.Info("slack workspace install removed", "team", team, "event", ev.Type, "was_installed", removed)
	return nil
}

// ingestCommand handles a slash command and returns the ephemeral text to
// answer it with ("" for none).
func (p *Platform) ingestCommand(ctx context.Context, c *slashCommand, received time.Time) (string, error) {
	if p.sink.Load() == nil {
		return "", errNotRunning
	}
	if c.ChannelID == "" || c.UserID == "" || c.TeamID == "" || c.Command == "" {
		p.drop(dropMalformed, "")
		return "", nil
	}
	dm := strings.HasPrefix(c.ChannelID, "D")
	if strings.TrimSpace(strings.TrimPrefix(c.Command, "/")) == "link" {
		if !dm || p.deps.Linker == nil {
			p.drop(dropCommandNotRouted, "")
			return "Send /link <code> in a direct message with the app.", nil
		}
		url := c.ResponseURL
		p.submitLink(c.TeamID, c.UserID, c.ChannelID, strings.TrimSpace(c.Text), func(ctx context.Context, reply string) {
			if url != "" {
				p.replyLinkCommand(ctx, url, reply)
			}
		})
		return "", nil
	}
	// Routed as a message of its user, who is then authorized by the
	// tenant (policy.refusal).
	tenant, created, _, drop := p.route(ctx, c.UserID, c.ChannelID, c.TeamID, dm)
	if drop == "" {
		drop = p.policy(tenant).refusal(c.UserID, dm)
	}
	if drop != "" {
		p.drop(drop, "")
		return "", nil
	}
	ev := slashEvent(c)
	err := p.inChatOrder(ctx, c.TeamID+"/"+c.ChannelID, tenant, func(ctx context.Context) error {
		// The response_url goes to the vault as the command is
		// delivered, in its chat's turn: a command that waited in the
		// intake has its reply window from then, and a replayed
		// request, not delivered again, leaves the vault as it is (the
		// posts the first copy took, a later command's response_url).
		handle := func() error {
			if c.ResponseURL != "" && ev.MessageType == "command" {
				k := vault.Key{Tenant: tenant, SessionKey: p.deps.Key(tenant, &ev.Source), Kind: vault.KindSlackResponseURL}
				ref := responseRef{team: c.TeamID, channel: c.ChannelID, user: c.UserID}.String()
				if err := p.deps.Vault.Put(ctx, k, vault.Entry{Value: vault.NewSecret(c.ResponseURL), Ref: ref, Stored: p.clock.Now()}); err != nil {
					return fmt.Errorf("slack: keep the response_url: %w", err)
				}
			}
			return p.deliver(ctx, tenant, created, &ev, received)
		}
		if c.TriggerID == "" {
			return handle()
		}
		// Once per trigger_id: a signed request replayed within the
		// signature's window is not delivered again.
		return p.once(ctx, "cmd/"+c.TeamID+":"+c.TriggerID, "", handle)
	})
	if err != nil {
		return "", err
	}
	return "Running `" + c.Command + "`…", nil
}

// command ingests slash command c, body as its route's, and returns the
// ephemeral text to answer it with. One the intake has no room for
// (errIntakeFull), which Slack does not send again, is answered so that its
// user sends it again; a copy another instance is handling stays busy
// (platform.ErrBusy): the user's resend would run it twice.
func (p *Platform) command(ctx context.Context, body []byte, c *slashCommand, received time.Time) (string, error) {
	text, err := p.ingestCommand(withIntake(ctx, routeCommands, body, received, ""), c, received)
	if errors.Is(err, errIntakeFull) {
		return "Too busy to run `" + c.Command + "` now; send it again in a moment.", nil
	}
	return text, err
}

// ingestPress handles a prompt button press: delivered as a
// prompt_response from the user who pressed, once per prompt message, to
// the tenant that posted the prompt (memory.promptOwnerOf), never by the
// payload's team, and authorized by that tenant (policy.refusal), as
// docs/contract.md says (with what is dropped). delivered is called when
// this copy was, in the chat's turn: a dropped press is not the prompt's
// answer. In the turn, the background work it starts (markPressed) is
// Run's to wait for: Run closes the queues before it waits.
func (p *Platform) ingestPress(ctx context.Context, pr *press, received time.Time, delivered func()) error {
	if p.sink.Load() == nil {
		return errNotRunning
	}
	p.seenIn(pr.channel, pr.team)
	owner, ok, err := p.memory.promptOwnerOf(ctx, pr.channel, pr.message)
	switch {
	case err != nil:
		return fmt.Errorf("slack: read the prompt's owner: %w", err)
	case !ok:
		p.drop(dropUnknownPrompt, "")
		return nil
	}
	tenant, team := owner.Tenant, owner.Team
	created := vault.Creation(p.deps.Vault, tenant) // a record kept without one
	if owner.Created != 0 {
		// As the record was judged: a tenant made again since does not
		// take the press.
		created = time.UnixMicro(owner.Created)
	}
	dm := strings.HasPrefix(pr.channel, "D")
	r, _ := p.owners.Load().Route(pr.user, platform.Chat{ID: pr.channel, Space: pr.team, DM: dm}) // zero when none places it
	if r.Grant && r.Tenant == tenant {
		p.grants.Add(ctx, pr.channel, pr.team, tenant, time.Time{}) // as the presser's message there would (route)
	}
	switch ok, err := p.mayAct(ctx, tenant, pr.channel); {
	case err != nil:
		return err
	case !ok:
		p.drop(dropPromptNotOwned, "")
		return nil
	}
	// Authorized before the dedupe: a press that is not admitted takes
	// no prompt from the users who are.
	if drop := p.policy(tenant).refusal(pr.user, dm); drop != "" {
		p.drop(drop, "")
		return nil
	}
	pr.team = team
	key := "press/" + team + ":" + pr.channel + ":" + pr.message
	if r, _ := ctx.Value(intakeRequestKey{}).(*intakeRequest); r != nil {
		r.dup = key // a press already delivered takes no intake entry (admit)
		// Its busy answer (tellBusy) is charged as admit charged it.
		defer func() { pr.tenant = r.rec.Tenant }()
	}
	// Charged to the tenant its presser routes to (none: the chat's
	// holder), as the presser's slash command would be: in a chat no tenant
	// holds, another tenant's users pressing the prompt spend their own
	// tenant's share of the intake, not the prompt's tenant's.
	return p.inChatOrder(ctx, team+"/"+pr.channel, r.Tenant, func(ctx context.Context) error {
		return p.once(ctx, key, "", func() error {
			tctx := platform.WithTenant(ctx, tenant)
			ev := pr.event(p.names.user(tctx, team, pr.user).name, p.names.channelName(tctx, team, pr.channel))
			err := p.deliver(ctx, tenant, created, &ev, received)
			if err == nil {
				delivered()
			}
			return err
		})
	})
}
