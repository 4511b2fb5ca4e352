package slack

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/platform"
	"connector/session"
)

// This file reads interaction payloads (POST /slack/interactions, Socket
// Mode interactive envelopes). A press of a prompt button (action_id
// hp1:<prompt_id>:<option_id>, prompt.go) becomes a prompt_response from
// the user who pressed, in the prompt's chat and thread, for the tenant
// that posted the prompt (ingestPress); every other
// interaction (the native adapter's own hermes_* buttons, modals,
// shortcuts) is answered and dropped with dropForeignAction.

// press is a prompt button press.
type press struct {
	// team is the payload's workspace until ingestPress sets it to the
	// workspace that posted the prompt, and tenant to the one the intake
	// charged it to (its presser's, else its chat's holder's).
	team, tenant, channel, user string
	// thread is the prompt message's thread ("" for a top-level prompt).
	thread string
	// message is the prompt message's ts (prompt_message_id).
	message                   string
	promptID, optionID, label string
	actionTS                  string
}

// pressOf reads a prompt press from ic; ok is false for any other
// interaction.
func pressOf(ic *slack.InteractionCallback) (press, bool) {
	if ic.Type != slack.InteractionTypeBlockActions || len(ic.ActionCallback.BlockActions) == 0 {
		return press{}, false
	}
	a := ic.ActionCallback.BlockActions[0]
	promptID, optionID, ok := contract.ParsePromptToken(a.ActionID)
	if !ok {
		return press{}, false
	}
	p := press{
		team:     cmp.Or(ic.Team.ID, ic.User.TeamID),
		channel:  cmp.Or(ic.Container.ChannelID, ic.Channel.ID),
		user:     ic.User.ID,
		thread:   cmp.Or(ic.Container.ThreadTs, ic.Message.ThreadTimestamp),
		message:  cmp.Or(ic.Container.MessageTs, ic.Message.Timestamp),
		promptID: promptID, optionID: optionID,
		label:    a.Text.Text,
		actionTS: cmp.Or(a.ActionTs, ic.ActionTs),
	}
	if p.channel == "" || p.user == "" {
		return press{}, false
	}
	return p, true
}

// interaction handles an interaction, from either route: a prompt press
// is ingested (ingestPress) and, once this press is stored as the
// prompt's answer, its prompt marked pressed; any other interaction is
// dropped. pr is the press, in its prompt's workspace once ingestPress
// authorized it (as busyPress needs it).
func (p *Platform) interaction(ctx context.Context, ic *slack.InteractionCallback, received time.Time) (pr press, err error) {
	pr, ok := pressOf(ic)
	if !ok {
		p.drop(dropForeignAction, "")
		return pr, nil
	}
	return pr, p.ingestPress(ctx, &pr, received, func() { p.markPressed(ic, &pr) })
}

// busyPress reports whether err, a press's, is the intake's having no
// room for it (errIntakeFull): Slack does not send a press again, so the
// route acknowledges it, then tells its user to press again (tellBusy).
func busyPress(err error) bool { return errors.Is(err, errIntakeFull) }

// maxBusyPosts bounds the busy answers being posted at once (tellBusy),
// a tenant's at most half of what the others leave (fairshare.Slots): a
// slow response_url holds no more of the Socket Mode envelopes handled
// beside the reader (maxBeside) than that, and one tenant's presses no
// more of its workspace's chat.postEphemeral budget, which every tenant
// there shares.
var maxBusyPosts = 8

// busyText is what the user of a press the intake had no room for is told.
const busyText = "Too busy to take your choice now; press it again in a moment."

// tellBusy tells the user of press pr, which the intake had no room for
// (busyPress), ephemerally to press again, in Run's lifetime (a shutdown
// ends the post): through its responseURL, else (a payload without one)
// with chat.postEphemeral in its channel (its prompt's workspace's token,
// as ingestPress set it, never the payload's team), on the share of the
// tenant the intake charged the press to, not the prompt's: another
// tenant's users pressing a prompt spend their own. Past its tenant's part of maxBusyPosts posts in flight
// its user is not told: the press is counted as dropped (overloaded).
func (p *Platform) tellBusy(responseURL string, pr *press) {
	run := p.intake.runCtx() // busyPress: the intake refused the press, Run ran
	if run == nil {
		return
	}
	if !p.busyPosts.Take(pr.tenant) {
		p.metrics.Dropped(platformName, dropOverloaded)
		return
	}
	defer p.busyPosts.Give(pr.tenant)
	ctx, cancel := context.WithTimeout(platform.WithTenant(run, pr.tenant), p.cfg.RequestTimeout)
	defer cancel()
	var err error
	if responseURL != "" {
		err = p.postResponseURL(ctx, responseURL, &slack.WebhookMessage{ResponseType: "ephemeral", Text: busyText})
	} else {
		err = p.callIn(ctx, pr.team, pr.channel, "chat.postEphemeral", func(ctx context.Context, c *slack.Client) error {
			_, err := c.PostEphemeralContext(ctx, pr.channel, pr.user, slack.MsgOptionText(busyText, false))
			return err
		})
	}
	if err != nil {
		p.log.Warn("slack busy answer to a press not sent", "err", p.errorText(err))
	}
}

// event is the press as an inbound: text /<option_id>, message_type
// command, from the user who pressed, in the prompt's thread.
func (p *press) event(userName, chatName string) contract.Event {
	src := slashSource(p.channel, p.user, p.thread, p.team) // pressOf: the user is set
	src.ChatName, src.UserName, src.MessageID = session.Str(chatName), session.Str(userName), p.actionTS
	return contract.Event{
		Text: "/" + p.optionID, MessageType: "command", MessageID: p.actionTS, Source: src,
		PromptResponse: &contract.PromptResponse{PromptID: p.promptID, OptionID: p.optionID, Label: p.label, PromptMessageID: p.message},
	}
}
