package telegram

import (
	"context"
	"strconv"
	"strings"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/internal/textsplit"
)

// sealedDrafts bounds Platform.sealed, the message each sealed draft stream
// became, so a repeated seal (the gateway retries an ambiguous one once)
// answers the same message id and sends nothing. It is per instance; the
// least recently sealed stream is forgotten first. The gateway keeps the
// same number of sealed streams per process.
const sealedDrafts = 512

// draftKey names one draft stream of a tenant's chat.
type draftKey struct {
	tenant string
	chat   int64
	draft  int64
}

// draft streams a preview of a reply being generated (sendMessageDraft,
// Telegram's native draft streaming): every frame replaces the preview of
// draft_id in the chat (and topic) with content, rendered as MarkdownV2
// (plain text if Telegram rejects the entities) and cut to one message. A
// draft is ephemeral on Telegram; final: true seals the stream by sending
// content as a real message (split like send) and answers its id, once: a
// repeated seal answers the same id. Telegram streams drafts into private
// chats only; in any other chat, with a zero draft_id or blank content the
// op fails with bad_request and calls nothing, so the gateway falls back to
// edit-based streaming.
func (p *Platform) draft(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	switch {
	case chat <= 0:
		return contract.Failed(contract.CodeBadRequest, "telegram draft: drafts stream only in private chats")
	case a.DraftID == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram draft: draft_id must be a non-zero integer")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "telegram draft: content is empty")
	}
	if a.Final {
		return p.sealDraft(ctx, tenant, chat, a)
	}
	preview := textsplit.Split(a.Content, splitRules)[0]
	params := &bot.SendMessageDraftParams{
		ChatID:          chat,
		MessageThreadID: topicThread(a.Metadata.ThreadID),
		DraftID:         strconv.FormatInt(a.DraftID, 10),
		Text:            renderMarkdownV2(preview),
		ParseMode:       models.ParseModeMarkdown,
	}
	err := p.paced(ctx, tenant, chat, false, func(ctx context.Context) error {
		_, err := p.bot.SendMessageDraft(ctx, params)
		if err != nil && isBadRequest(err, "can't parse entities") {
			params.Text, params.ParseMode = preview, ""
			_, err = p.bot.SendMessageDraft(ctx, params)
		}
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	return contract.OK("")
}

// sealDraft sends a stream's final content as a real message, once per
// stream, and answers the first part's id.
func (p *Platform) sealDraft(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	k := draftKey{tenant: tenant, chat: chat, draft: a.DraftID}
	if id, ok := p.sealed.Get(k); ok {
		return contract.OK(id)
	}
	first, _, r := p.sendParts(ctx, tenant, chat, a, textsplit.Split(a.Content, splitRules), nil)
	if first != "" {
		// Even a partly sent seal is the stream's message: a retry must not
		// send the parts that went out again.
		p.sealed.Add(k, first)
	}
	if !r.Success {
		return r
	}
	return contract.OK(first)
}
