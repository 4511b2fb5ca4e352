package discord

import (
	"context"
	"errors"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// ops is the egress table; its keys are the descriptor's supported_ops.
// Every op but follow_up is addressed to a chat (a channel id).
var ops = platform.Ops[*Platform, string]{
	contract.OpSend:         (*Platform).opSend,
	contract.OpEdit:         (*Platform).opEdit,
	contract.OpTyping:       (*Platform).opTyping,
	contract.OpGetChatInfo:  (*Platform).opGetChatInfo,
	contract.OpSendMedia:    (*Platform).opSendMedia,
	contract.OpFollowUp:     (*Platform).opFollowUp,
	contract.OpPrompt:       (*Platform).opPrompt,
	contract.OpReact:        (*Platform).opReact,
	contract.OpDelete:       (*Platform).opDelete,
	contract.OpThreadCreate: (*Platform).opThreadCreate,
	contract.OpThreadRename: (*Platform).opThreadRename,
}

// Execute implements platform.Platform. Chat-addressed ops are re-checked
// against the caller's tenant (a foreign or unknown chat gets the uniform
// structured decline); every REST call runs under ctx (RequestTimeout when
// ctx has no deadline) and counts against the tenant's fair share.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	h, ok := ops[a.Op]
	if !ok {
		return contract.Failed(contract.CodeUnsupportedOp, "discord does not support op "+textsplit.Truncate(a.Op, 40))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.RequestTimeout)
		defer cancel()
	}
	ctx = platform.WithTenant(ctx, tenant)
	if a.Op == contract.OpFollowUp {
		return h(p, ctx, tenant, "", a)
	}
	chatID := string(a.ChatID)
	if r, ok := p.checkChat(ctx, tenant, chatID); !ok {
		return r
	}
	return h(p, ctx, tenant, chatID, a)
}

// checkChat checks the chat an op is addressed to: the chat id must be a
// Discord id and be granted to the tenant (ChatGranted) or belong to it
// (ChatTenant: the Gateway's cache, or a lookup at Discord on an instance
// without it).
// Until the owners are known the answer is unavailable (retryable), never
// the decline. When the chat is not the tenant's it returns the result to
// answer and false.
func (p *Platform) checkChat(ctx context.Context, tenant, chatID string) (contract.Result, bool) {
	if !isSnowflake(chatID) {
		return contract.Failed(contract.CodeBadRequest, "chat_id is not a Discord channel id"), false
	}
	if p.ChatGranted(chatID, tenant) {
		return contract.Result{}, true // a bound author of the tenant spoke there
	}
	owner, err := p.ChatTenant(ctx, chatID)
	if errors.Is(err, platform.ErrUnavailable) {
		return ownerUnavailableResult(err), false
	}
	if err != nil || owner != tenant {
		return contract.Declined(platformName), false
	}
	return contract.Result{}, true
}
