package telegram

import (
	"context"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// inlineKeyboard is an InlineKeyboardMarkup of callback buttons. It is the
// connector's own type because the client library's button always writes
// copy_text, and Telegram takes exactly one action field per button.
type inlineKeyboard struct {
	InlineKeyboard [][]inlineButton `json:"inline_keyboard"`
}

type inlineButton struct {
	Text         string `json:"text"`
	Style        string `json:"style,omitempty"`
	CallbackData string `json:"callback_data"`
}

// telegramStyles are the button styles Telegram renders (red, green, blue).
var telegramStyles = map[string]bool{contract.StyleDanger: true, contract.StyleSuccess: true, contract.StylePrimary: true}

// maxPromptOptions bounds a prompt's buttons (Telegram takes about 100 per
// keyboard; a question with more choices is not a button prompt).
const maxPromptOptions = 25

// prompt sends the question (MarkdownV2, split like send, into the topic of
// metadata.thread_id, replying to reply_to) with an inline keyboard on its
// last part: one button per option, one per row, whose callback_data is
// hp1:<prompt_id>:<option_id>, styled primary, success or danger as the
// option says (secondary is Telegram's default look). The result's message_id is the message carrying the
// keyboard, which a press names as prompt_message_id. A press comes back as
// a callback_query update (normalize.go), answered with
// answerCallbackQuery once delivered.
func (p *Platform) prompt(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, maxPromptOptions)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "telegram prompt: "+err.Error())
	}
	kb := inlineKeyboard{InlineKeyboard: make([][]inlineButton, len(buttons))}
	for i, b := range buttons {
		style := b.Style
		if !telegramStyles[style] {
			style = "" // Telegram's default look
		}
		kb.InlineKeyboard[i] = []inlineButton{{Text: b.Label, Style: style, CallbackData: b.Token}}
	}
	_, last, r := p.sendParts(ctx, tenant, chat, a, textsplit.Split(a.Content, splitRules), &kb, "")
	if r = platform.Whole(r); !r.Success {
		return r
	}
	return contract.OK(last)
}
