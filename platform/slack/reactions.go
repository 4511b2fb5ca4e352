package slack

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"connector/platform"
	"connector/vault"
)

// This file turns reactions into turns where the tenant's
// reaction_triggers asks for it, as the native adapter's
// _handle_slack_reaction does: a reaction (added or removed) by someone
// other than the bot, to a message, becomes a message
// "reaction:<added|removed>:<emoji>" from the reactor, in the reacted-to
// message's thread (or the tenant's reaction_trigger_target), which goes
// through the tenant's gates past the mention rules. Without the setting
// reactions start nothing. The native adapter also hands every reaction
// to its reaction hook (a plugin callback inside the gateway process); the
// connector's contract has no frame for a hook that is not a turn, so
// those reactions stay dropped (docs/settings-parity.md).

// Drop reasons of reactions.
const (
	dropReactionItem    = "reaction_not_on_message"
	dropReactionByBot   = "reaction_by_bot"
	dropReactionTrigger = "reaction_not_a_trigger"
	dropReactionBotMsg  = "reaction_not_on_bot_message"
	dropReactionTarget  = "reaction_target_not_owned"
)

// reactionEmoji are the reactions whose message names them by their
// Unicode emoji (_REACTION_EMOJI_MAP), so a skill matching the text sees
// the character a user would have typed; any other keeps its name.
var reactionEmoji = map[string]string{
	"thumbsup": "👍", "+1": "👍", "thumbsdown": "👎", "-1": "👎", "white_check_mark": "✅",
	"heavy_check_mark": "✅", "x": "❌", "no_entry": "⛔", "warning": "⚠\ufe0f", "rotating_light": "🚨",
	"eyes": "👀", "rocket": "🚀", "tada": "🎉", "fire": "🔥", "wave": "👋",
}

// reactionTS is the ts of the message reaction event ev (its item set)
// makes.
func reactionTS(ev *wireEvent) string {
	return cmp.Or(ev.EventTS, fmt.Sprintf("reaction-%s-%s-%s", ev.Item.TS, ev.Reaction, ev.User))
}

// reactionTurn reads reaction event ev (of envelope env, in workspace
// team, whose bot user is bot) into the message it makes under the
// tenant's policy pol, or says why it makes none. look reads the
// reacted-to message (its thread and author). mine (nil: every one is)
// reports whether the reacted-to message is the tenant's: where several
// tenants may post (docs/security.md, rule 3: a chat no binding or claim
// holds, a Slack Connect channel another tenant may act in: heldAlone),
// whether the bot posted it for the tenant; where the tenant holds the chat
// alone, that it is not remembered as posted there for another tenant
// (before a rebind or a claim: Grants.PostedByAnother), nor, unless
// remembered as the tenant's, posted before the tenant's binding or claim
// was written (Ownership.HeldSince); without an
// allowlist only a reaction to the tenant's own answer counts, not one to
// another tenant's.
func reactionTurn(ctx context.Context, look lookups, env *envelope, ev *wireEvent, pol *policy, bot string, mine func() bool) (message, string) {
	item, team := ev.Item, env.installTeam()
	switch {
	case item == nil || item.Type != "message":
		return message{}, dropReactionItem
	case item.Channel == "" || item.TS == "" || ev.User == "" || ev.Reaction == "":
		return message{}, dropMalformed
	case bot != "" && ev.User == bot:
		return message{}, dropReactionByBot
	case pol.reactions == nil:
		return message{}, dropReaction
	}
	explicit := len(pol.reactions) > 0
	if explicit && !pol.reactions[strings.Trim(ev.Reaction, ":")] {
		return message{}, dropReactionTrigger
	}
	if !explicit && (bot != "" && ev.ItemUser != "" && ev.ItemUser != bot || mine != nil && !mine()) { // not the bot's: no store read
		return message{}, dropReactionBotMsg
	}
	// The reacted-to message's thread; without an allowlist only a
	// reaction to the bot's own message counts. When the message cannot
	// be read it is taken as its own thread's root, unchecked, as natively.
	thread := item.TS
	if msgs, ok := look.reacted(ctx, team, item.Channel, item.TS); ok {
		thread = cmp.Or(msgs[0].ThreadTimestamp, msgs[0].Timestamp, item.TS)
		if author := cmp.Or(ev.ItemUser, msgs[0].User); !explicit && author != "" && bot != "" && author != bot {
			return message{}, dropReactionBotMsg
		}
	}
	syn := &wireEvent{
		Type: "message", User: ev.User, Channel: item.Channel, ThreadTS: thread, TeamID: team,
		// ev.Type is reaction_added or reaction_removed.
		Text: "reaction:" + strings.TrimPrefix(ev.Type, "reaction_") + ":" + cmp.Or(reactionEmoji[ev.Reaction], ev.Reaction),
		TS:   reactionTS(ev),
	}
	m := message{ev: syn, scope: team, install: team, dedupeKey: team + ":" + syn.TS, force: true}
	if pol.reactionTarget != "" {
		syn.Channel, syn.ChannelType = pol.reactionTarget, "channel"
		if strings.HasPrefix(syn.Channel, "D") {
			syn.ChannelType = "im"
		}
		syn.ThreadTS = pol.reactionThread
		m.noThread = pol.reactionThread == ""
	}
	return m, ""
}

// ingestReaction handles a reaction event: routed where it was made (the
// ownership order, by the reactor), it becomes the tenant's turn when its
// reaction_triggers says so (reactionTurn). A reaction_trigger_target the
// tenant may not act in drops it.
func (p *Platform) ingestReaction(ctx context.Context, env *envelope, ev *wireEvent, received time.Time) error {
	team, channel := env.installTeam(), ev.Item.Channel
	r, ok := p.owners.Load().Route(ev.User, chatOf(channel, team))
	if !ok || r.Drop != "" {
		p.drop(cmp.Or(r.Drop, dropUnclaimed), env.EventID) // Route is zero when !ok
		return nil
	}
	created := vault.Creation(p.deps.Vault, r.Tenant) // the creation it was routed under
	bot, _ := p.works.botUser(ctx, team)
	bot = cmp.Or(bot, env.botUser())
	tctx := platform.WithTenant(ctx, r.Tenant)
	var unknown error // the store could not tell whom the message was posted for
	mine := func() bool {
		if p.heldAlone(tctx, channel, team, r.Tenant) { // not one remembered as another's, posted before a rebind or a claim
			if at, _, _ := p.PostedAt(ev.Item.TS); !at.Before(p.owners.Load().HeldSince(chatOf(channel, team))) {
				another, err := p.grants.PostedByAnother(tctx, channel, ev.Item.TS, r.Tenant)
				unknown = err
				return err == nil && !another
			}
		}
		// Not held alone, or posted before the tenant held the channel.
		posted, err := p.grants.PostedFor(tctx, channel, ev.Item.TS, r.Tenant)
		unknown = err
		return posted
	}
	m, drop := reactionTurn(tctx, p.names, env, ev, p.policy(r.Tenant), bot, mine)
	if unknown != nil { // not stored: Slack sends it again (a 503), as a store that could tell the chat's owner
		return unknown
	}
	if drop != "" {
		p.drop(drop, env.EventID)
		return nil
	}
	if m.ev.Channel != channel {
		switch ok, err := p.mayAct(ctx, r.Tenant, m.ev.Channel); {
		case err != nil:
			return err
		case !ok:
			p.drop(dropReactionTarget, env.EventID)
			return nil
		}
	}
	if r.Grant && !vault.Earlier(p.deps.Vault, r.Tenant, created) { // not for one made again while Slack was asked
		p.grants.Add(ctx, channel, team, r.Tenant, created)
	}
	m.routed = &routing{tenant: r.Tenant, created: created, owner: r.Owner}
	return p.ingestMessage(ctx, env, &m, received)
}
