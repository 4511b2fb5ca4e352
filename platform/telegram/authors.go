package telegram

import (
	"context"
	"errors"
	"strings"

	"github.com/go-telegram/bot"

	"connector/platform"
	"connector/session"
)

// This file applies author-first routing (platform.Authors, Hermes
// contract §3 "Author-first resolution", §7.1) to Telegram updates, and
// consumes the "/link <code>" DMs that link an account. An update the
// author table says nothing about falls back to the chat's tenant. A
// tenant may act in the chat where an update routed to it by author was
// posted (platform.Grants): a linked user's DM chat, a group.

// route resolves the tenant of in, author first. owner is set when the
// author is linked to it (the owner floor: the group gate is skipped);
// drop is why no tenant takes it.
func (p *Platform) route(ctx context.Context, in *inbound) (tenant string, owner bool, drop string) {
	src := &in.event.Source
	r, ok := (*p.authors.Load()).Route(src.UserID.Value, src.ChatType == session.ChatTypeDM, src.ChatID)
	switch {
	case ok && r.Drop != "":
		return "", false, r.Drop
	case ok:
		p.grants.Add(ctx, src.ChatID, r.Tenant)
		return r.Tenant, r.Owner, ""
	}
	if tenant = (*p.chats.Load())[in.chatID]; tenant == "" {
		return "", false, dropUnclaimed
	}
	return tenant, false, ""
}

// linkCode returns the code of in when it is a "/link <code>" DM the
// platform must consume.
func (p *Platform) linkCode(in *inbound) (string, bool) {
	if p.deps.Linker == nil || in.msg == nil || in.event.Source.ChatType != session.ChatTypeDM || in.event.Source.IsBot {
		return "", false
	}
	return platform.ParseLinkCommand(in.msg.Text)
}

// redeemLink redeems code for the DM's author and answers in the DM,
// paced like any message to the chat.
func (p *Platform) redeemLink(ctx context.Context, in *inbound, code string) {
	user := in.event.Source.UserID.Value
	tenant, err := p.deps.Linker.Link(ctx, platformName, user, code)
	reply, reason := platform.LinkAnswer(err)
	p.metrics.Dropped(platformName, reason)
	switch {
	case err == nil:
		p.grants.Add(ctx, in.event.Source.ChatID, tenant)
	case !errors.Is(err, platform.ErrLinkRefused):
		p.log.Warn("telegram /link not redeemed", "user_id", user, "err", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	err = p.paced(ctx, tenant, in.chatID, false, func(ctx context.Context) error {
		_, err := p.sendMessage(ctx, &bot.SendMessageParams{ChatID: in.chatID, Text: reply}, reply)
		return err
	})
	if err != nil {
		p.log.Warn("telegram /link reply not sent", "chat_id", in.chatID, "err", p.errorText(err))
	}
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// when it claimed the chat, when the chat is the DM of a user linked to
// it (a private chat's id is its user's), or when an update routed to it
// by author was posted there (and it is still remembered). The first two
// hold on every instance and across restarts.
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) bool {
	a := *p.authors.Load()
	return a.Claimed(chatID, tenant) || (!strings.HasPrefix(chatID, "-") && a.Linked(chatID, tenant)) || p.grants.Has(ctx, chatID, tenant)
}
