package whatsapp

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// maxMessageRunes is the native adapter's MAX_MESSAGE_LENGTH: text is
// split into messages of at most 4,096 code points.
const maxMessageRunes = 4096

// splitRules cut content longer than maxMessageRunes at a paragraph, line
// or word break, keeping code fences whole across pieces.
var splitRules = textsplit.Rules{Limit: maxMessageRunes, Breaks: []string{"\n\n", "\n", " "}, KeepHalf: true, Fence: textsplit.LineFences}

// Interactive message limits (Graph API).
const (
	maxButtons       = 3    // reply buttons on one message
	maxListRows      = 10   // rows of a list message
	maxBodyRunes     = 1024 // interactive body text
	maxButtonTitle   = 20
	maxRowTitle      = 24
	maxRowDesc       = 72
	listButtonLabel  = "Choose"
	listSectionTitle = "Options"
)

// textMessage is a /messages text payload to user, quoting replyTo when
// set; preview_url as the native adapter sends it.
func textMessage(user, body, replyTo string) map[string]any {
	return envelope(user, "text", map[string]any{"body": body, "preview_url": true}, replyTo)
}

// envelope is the common /messages payload around a typed block.
func envelope(user, kind string, block any, replyTo string) map[string]any {
	msg := map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": user, "type": kind, kind: block}
	if replyTo != "" {
		msg["context"] = map[string]string{"message_id": replyTo}
	}
	return msg
}

// replyRef is the message a send quotes: reply_to when it names a message
// id (no control characters, at most 256 bytes), else none.
func replyRef(id contract.ID) string {
	s := string(id)
	if len(s) > 256 || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == utf8.RuneError }) {
		return ""
	}
	return s
}

// send posts content converted to WhatsApp's markdown (formatMessage),
// split into messages of at most 4,096 code points, the first quoting
// reply_to. The result carries the first message's id; a later part that
// fails is reported with how many went out, as a success
// (platform.SendParts).
func (p *Platform) send(ctx context.Context, tenant string, c chat, a *contract.Action) contract.Result {
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "whatsapp_cloud send: content is empty")
	}
	_, _, r := p.sendText(ctx, tenant, c, a.Op, formatMessage(a.Content), replyRef(a.ReplyTo))
	return r
}

// sendText sends text split into pieces, the first quoting replyTo, and
// returns the first and last message ids with the result. Each piece sent
// is remembered (quotes.sent, a store write) while the next one goes out,
// in order, by one writer, which has written them all before the result:
// a long answer waits for one write, not one per piece.
func (p *Platform) sendText(ctx context.Context, tenant string, c chat, op, text, replyTo string) (first, last string, r contract.Result) {
	parts, created := textsplit.Split(text, splitRules), platform.AuthorizedCreation(ctx, p.vault, tenant)
	sent, written := make(chan [2]string, len(parts)), make(chan struct{})
	go func() {
		defer close(written)
		for m := range sent {
			p.quotes.sent(ctx, tenant, c.user, m[0], m[1], created)
		}
	}()
	defer func() { close(sent); <-written }()
	return platform.SendParts(ctx, parts, func(i int, part string) (string, error) {
		quote := ""
		if i == 0 {
			quote = replyTo
		}
		id, err := p.post(ctx, tenant, c, textMessage(c.user, part, quote))
		if err == nil {
			sent <- [2]string{id, part}
		}
		return id, err
	}, func(err error) contract.Result { return p.failure(op, err) })
}

// senderMark prefixes the tenant in a message's biz_opaque_callback_data,
// which Meta echoes in the message's statuses: they are counted under the
// tenant that sent it, whoever owns the number by then. Meta takes at most
// maxCallback bytes there.
const (
	senderMark  = "connector.tenant:"
	maxCallback = 512
)

// post sends one /messages payload from the conversation's number, paced,
// marked with its sender (senderMark). Once its turn comes, the message
// goes out only while tenant may still act on the user from that number
// (mayAct): a number bound to another tenant, or a link ended, while it
// waited declines it (errRebound).
func (p *Platform) post(ctx context.Context, tenant string, c chat, msg map[string]any) (string, error) {
	if mark := senderMark + tenant; len(mark) <= maxCallback {
		msg["biz_opaque_callback_data"] = mark
	}
	var id string
	err := p.paced(ctx, tenant, c.number, c.user, func(ctx context.Context) (err error) {
		if !p.mayAct(tenant, c.user, c.number) {
			return errRebound
		}
		id, err = p.graph.sendMessage(ctx, c.number, msg)
		return err
	})
	return id, err
}

// prompt asks the question with one tap per option: reply buttons for up
// to 3 options, a list for up to 10, and beyond that numbered text (the
// user answers by typing). Each button or row id is the option's hp1
// token; who posted the message (tenant, prompt_id) is recorded
// (promptPosted), and a tap comes back to that tenant as a
// prompt_response (normalize.go classify) once. A question longer than an
// interactive body (1,024 code points) goes first as text, its last part
// as the body. The result's message_id is the message carrying the taps.
func (p *Platform) prompt(ctx context.Context, tenant string, c chat, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, 100)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "whatsapp_cloud prompt: "+err.Error())
	}
	// Its record keeps the creation the action was dispatched (or the op
	// authorized) under: an op returning once its tenant was made again
	// answers none of the new one's.
	created := platform.AuthorizedCreation(ctx, p.vault, tenant)
	question := formatMessage(a.Content)
	if len(buttons) > maxListRows {
		var b strings.Builder
		b.WriteString(question)
		b.WriteString("\n")
		for i, o := range buttons {
			fmt.Fprintf(&b, "\n%d. %s", i+1, o.Label)
		}
		_, last, r := p.sendText(ctx, tenant, c, a.Op, b.String(), replyRef(a.ReplyTo))
		if r = platform.Whole(r); !r.Success {
			return r
		}
		return contract.OK(last)
	}
	pieces := textsplit.Split(question, textsplit.Rules{Limit: maxBodyRunes, Breaks: splitRules.Breaks, KeepHalf: true, Fence: textsplit.LineFences})
	body, lead := pieces[len(pieces)-1], strings.Join(pieces[:len(pieces)-1], "\n\n")
	reply := replyRef(a.ReplyTo)
	if lead != "" {
		if _, _, r := p.sendText(ctx, tenant, c, a.Op, lead, reply); !platform.Whole(r).Success {
			return platform.Whole(r)
		}
		reply = ""
	}
	interactive := map[string]any{"type": "button", "body": map[string]string{"text": body}}
	if len(buttons) <= maxButtons {
		list := make([]map[string]any, len(buttons))
		for i, o := range buttons {
			list[i] = map[string]any{"type": "reply", "reply": map[string]string{"id": o.Token, "title": label(o.Label, maxButtonTitle)}}
		}
		interactive["action"] = map[string]any{"buttons": list}
	} else {
		rows := make([]map[string]string, len(buttons))
		for i, o := range buttons {
			rows[i] = map[string]string{"id": o.Token, "title": label(o.Label, maxRowTitle)}
			if utf8.RuneCountInString(o.Label) > maxRowTitle {
				rows[i]["description"] = label(o.Label, maxRowDesc)
			}
		}
		interactive["type"] = "list"
		interactive["action"] = map[string]any{"button": listButtonLabel, "sections": []map[string]any{{"title": listSectionTitle, "rows": rows}}}
	}
	id, err := p.post(ctx, tenant, c, envelope(c.user, "interactive", interactive, reply))
	if err != nil {
		return p.failure(a.Op, err)
	}
	p.quotes.sent(ctx, tenant, c.user, id, "", created)
	p.promptPosted(ctx, c.number, c.user, id, promptRecord{Tenant: tenant, PromptID: a.PromptID, Created: created})
	return contract.OK(id)
}

// label cuts a title to n code points, the last being "…", as the native
// _truncate_button_label does.
func label(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(1, n-1)]) + "…"
}

// react puts emoji on message_id (a reaction message); remove takes the
// reaction off (an empty emoji).
func (p *Platform) react(ctx context.Context, tenant string, c chat, a *contract.Action) contract.Result {
	target := replyRef(a.MessageID)
	switch {
	case target == "":
		return contract.Failed(contract.CodeBadRequest, "whatsapp_cloud react: message_id is not a message id")
	case !a.Remove && (a.Emoji == "" || len(a.Emoji) > 64):
		return contract.Failed(contract.CodeBadRequest, "whatsapp_cloud react: emoji is empty or too long")
	}
	emoji := a.Emoji
	if a.Remove {
		emoji = ""
	}
	if _, err := p.post(ctx, tenant, c, envelope(c.user, "reaction", map[string]string{"message_id": target, "emoji": emoji}, "")); err != nil {
		return p.failure(a.Op, err)
	}
	return contract.OK("")
}

// typing marks the user's latest message read and shows the typing
// indicator (one Graph call). With no message of the user known there is
// nothing to attach it to, and typing succeeds doing nothing, as natively.
func (p *Platform) typing(ctx context.Context, tenant string, c chat, a *contract.Action) contract.Result {
	if c.last == "" {
		return contract.OK("")
	}
	if err := p.appCall(ctx, tenant, c, func(ctx context.Context) error { return p.graph.markRead(ctx, c.number, c.last) }); err != nil {
		return p.failure(a.Op, err)
	}
	return contract.OK("")
}

// getChatInfo answers as the native adapter: the Cloud API has no chat
// lookup, so the name is the wa_id and the type dm.
func (p *Platform) getChatInfo(_ context.Context, _ string, c chat, _ *contract.Action) contract.Result {
	r := contract.OK("")
	r.ChatInfo = &contract.ChatInfo{Name: c.user, Type: "dm"}
	return r
}
