package discord

import (
	"cmp"
	"context"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
)

// Discord's message component limits: 5 action rows of 5 buttons, labels of
// at most 80 characters.
const (
	buttonsPerRow  = 5
	maxPromptRows  = 5
	maxButtonLabel = 80
)

// buttonStyles maps the gateway's option style to Discord's button style;
// anything else is secondary (grey).
var buttonStyles = map[string]discordgo.ButtonStyle{
	contract.StylePrimary: discordgo.PrimaryButton,
	contract.StyleSuccess: discordgo.SuccessButton,
	contract.StyleDanger:  discordgo.DangerButton,
}

// opPrompt posts the question with one button per option, each carrying
// the callback token hp1:<prompt_id>:<option_id> as its custom_id. A
// question over 2,000 code points is split; the buttons ride the last
// piece, whose id is the result's message_id (the message a press names as
// prompt_message_id). A press comes back through the interactions endpoint
// as a prompt_response inbound (interaction.go).
func (p *Platform) opPrompt(ctx context.Context, _, chatID string, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, buttonsPerRow*maxPromptRows)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "discord prompt: "+err.Error())
	}
	ref, bad := replyRef(a)
	if bad != "" {
		return contract.Failed(contract.CodeBadRequest, bad)
	}
	pieces := textsplit.Split(a.Content, splitRules)
	_, last, r := p.postPieces("prompt", pieces, func(i int, piece string) (string, error) {
		body := discordgo.MessageSend{Content: piece, AllowedMentions: allowedMentions}
		if i == 0 {
			body.Reference = ref
		}
		if i == len(pieces)-1 {
			body.Components = buttonRows(buttons)
		}
		var m messageAnswer
		err := p.rest(ctx, "POST", discordgo.EndpointChannelMessages(chatID), &body, &m)
		return m.ID, err
	})
	if !r.Success {
		return r
	}
	return contract.OK(last)
}

// buttonRows lays buttons out in action rows of buttonsPerRow.
func buttonRows(buttons []contract.PromptButton) []discordgo.MessageComponent {
	rows := make([]discordgo.MessageComponent, 0, (len(buttons)+buttonsPerRow-1)/buttonsPerRow)
	var row *discordgo.ActionsRow
	for i, b := range buttons {
		if i%buttonsPerRow == 0 {
			row = &discordgo.ActionsRow{}
			rows = append(rows, row)
		}
		row.Components = append(row.Components, discordgo.Button{
			Style: cmp.Or(buttonStyles[b.Style], discordgo.SecondaryButton), Label: textsplit.TruncateRunes(b.Label, maxButtonLabel), CustomID: b.Token,
		})
	}
	return rows
}

// replyRef is the message reference for an action's reply_to (nil when
// none), or the bad_request text when reply_to is not a message id.
func replyRef(a *contract.Action) (*discordgo.MessageReference, string) {
	if a.ReplyTo == "" {
		return nil, ""
	}
	if !isSnowflake(string(a.ReplyTo)) {
		return nil, "reply_to is not a Discord message id"
	}
	no := false
	return &discordgo.MessageReference{MessageID: string(a.ReplyTo), ChannelID: string(a.ChatID), FailIfNotExists: &no}, ""
}
