package slack

import (
	"cmp"
	"context"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// Block Kit limits a prompt lives within.
const (
	maxPromptOptions   = 25   // buttons per prompt
	maxActionsElements = 5    // buttons per actions block, as natively
	maxSectionRunes    = 3000 // text of a section block
	maxButtonRunes     = 75   // a button's text
)

// promptSplit cuts a prompt's question to section-sized parts.
var promptSplit = textsplit.Rules{Limit: maxSectionRunes, Breaks: splitRules.Breaks, KeepHalf: true, Fence: splitRules.Fence}

// prompt posts the question (mrkdwn, into the thread, split to fit a
// section block) with Block Kit buttons on its last part: one per option,
// at most five per actions block, whose action_id is
// hp1:<prompt_id>:<option_id> and value the option id, styled primary
// (primary and success) or danger, else Slack's default. The result's
// message_id is the message carrying the buttons, which a press names as
// prompt_message_id. Who posted it (the tenant, and the workspace whose
// token did) is remembered under the message's channel and ts
// (memory.promptPosted): a press comes back through the interactions
// route (interactions.go) to that tenant, whichever workspace the presser
// is of, and the message is updated with that workspace's token to show
// the choice.
func (p *Platform) prompt(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, maxPromptOptions)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "slack prompt: "+err.Error())
	}
	parts := textsplit.Split(toMrkdwn(a.Content), promptSplit)
	last := parts[len(parts)-1]
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, last, false, false), nil, nil)}
	var row []slack.BlockElement
	for i, b := range buttons {
		el := slack.NewButtonBlockElement(b.Token, b.ID, slack.NewTextBlockObject(slack.PlainTextType, textsplit.TruncateRunes(b.Label, maxButtonRunes), true, false))
		switch b.Style {
		case contract.StylePrimary, contract.StyleSuccess:
			el = el.WithStyle(slack.StylePrimary)
		case contract.StyleDanger:
			el = el.WithStyle(slack.StyleDanger)
		}
		row = append(row, el)
		if len(row) == maxActionsElements || i == len(buttons)-1 {
			blocks = append(blocks, slack.NewActionBlock("", row...))
			row = nil
		}
	}
	// Its record keeps the creation the op was authorized under: an op
	// returning once its tenant was made again answers none of the new one's.
	owner := promptOwner{Tenant: tenant, Team: t.team, Created: creation(ctx, p.memory.vault, tenant)}
	_, lastTS, r := p.postParts(ctx, tenant, t, a, parts, blocks)
	if r = platform.Whole(r); !r.Success {
		return r
	}
	if err := p.memory.promptPosted(context.WithoutCancel(ctx), t.channel, lastTS, owner); err != nil {
		p.log.Warn("slack prompt owner not stored: its presses will be dropped", "channel_id", t.channel, "err", err)
	}
	return contract.OK(lastTS)
}

// pressUpdateTimeout bounds the update of a pressed prompt.
const pressUpdateTimeout = 10 * time.Second

// markPressed rewrites a pressed prompt (chat.update), in the background
// after the press was acknowledged: its buttons give way to a line naming
// the choice and who made it, so it cannot be pressed twice.
func (p *Platform) markPressed(ic *slack.InteractionCallback, pr *press) {
	var kept []slack.Block
	for _, b := range ic.Message.Blocks.BlockSet {
		if b.BlockType() != slack.MBTAction {
			kept = append(kept, b)
		}
	}
	kept = append(kept, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "Selected *"+cmp.Or(pr.label, pr.optionID)+"* (<@"+pr.user+">)", false, false)))
	text := ic.Message.Text
	p.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), pressUpdateTimeout)
		defer cancel()
		err := p.call(ctx, pr.team, "chat.update", func(ctx context.Context, c *slack.Client) error {
			_, _, _, err := c.UpdateMessageContext(ctx, pr.channel, pr.message, slack.MsgOptionText(text, false), slack.MsgOptionBlocks(kept...))
			return err
		})
		if err != nil {
			p.log.Debug("slack pressed prompt not updated", "channel_id", pr.channel, "err", p.errorText(err))
		}
	})
}
