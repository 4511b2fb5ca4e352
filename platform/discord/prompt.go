package discord

import (
	"context"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
)

// Discord's message component limits: 5 action rows of 5 buttons, labels of
// at most 80 characters.
const (
	buttonsPerRow   = 5
	maxPromptRows   = 5
	maxButtonLabel  = 80
	componentRow    = 1
	componentButton = 2
)

// buttonStyles maps the gateway's option style to Discord's button style;
// anything else is secondary (grey).
var buttonStyles = map[string]int{
	contract.StylePrimary:   1,
	contract.StyleSecondary: 2,
	contract.StyleSuccess:   3,
	contract.StyleDanger:    4,
}

// wireComponent is an action row or a button of a message.
type wireComponent struct {
	Type       int             `json:"type"`
	Style      int             `json:"style,omitempty"`
	Label      string          `json:"label,omitempty"`
	CustomID   string          `json:"custom_id,omitempty"`
	Components []wireComponent `json:"components,omitempty"`
}

// promptMessage is the body of the POST that carries a prompt's buttons.
type promptMessage struct {
	postMessage
	Components []wireComponent `json:"components"`
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
	last := pieces[len(pieces)-1]
	if len(pieces) > 1 {
		if _, err := p.postPieces(ctx, chatID, pieces[:len(pieces)-1], ref); err != nil {
			return p.failed("prompt", err, "")
		}
		ref = nil
	}
	body := promptMessage{
		postMessage: postMessage{Content: last, AllowedMentions: allowedMentions, Reference: ref},
		Components:  buttonRows(buttons),
	}
	var m messageAnswer
	if err := p.rest(ctx, "POST", discordgo.EndpointChannelMessages(chatID), &body, &m); err != nil {
		return p.failed("prompt", err, "")
	}
	return contract.OK(m.ID)
}

// buttonRows lays buttons out in action rows of buttonsPerRow.
func buttonRows(buttons []contract.PromptButton) []wireComponent {
	rows := make([]wireComponent, 0, (len(buttons)+buttonsPerRow-1)/buttonsPerRow)
	for i, b := range buttons {
		if i%buttonsPerRow == 0 {
			rows = append(rows, wireComponent{Type: componentRow})
		}
		style, ok := buttonStyles[b.Style]
		if !ok {
			style = buttonStyles[contract.StyleSecondary]
		}
		row := &rows[len(rows)-1]
		row.Components = append(row.Components, wireComponent{
			Type: componentButton, Style: style, Label: textsplit.TruncateRunes(b.Label, maxButtonLabel), CustomID: b.Token,
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
