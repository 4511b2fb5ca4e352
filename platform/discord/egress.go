package discord

import (
	"context"
	"errors"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// opHandler performs one outbound op for a tenant.
type opHandler func(ctx context.Context, tenant string, a *contract.Action) contract.Result

// handlers is the egress table; its keys are the descriptor's supported_ops.
func (p *Platform) handlers() map[string]opHandler {
	return map[string]opHandler{
		contract.OpSend:         p.chatOp(p.opSend),
		contract.OpEdit:         p.chatOp(p.opEdit),
		contract.OpTyping:       p.chatOp(p.opTyping),
		contract.OpGetChatInfo:  p.chatOp(p.opGetChatInfo),
		contract.OpSendMedia:    p.chatOp(p.opSendMedia),
		contract.OpFollowUp:     p.opFollowUp,
		contract.OpPrompt:       p.chatOp(p.opPrompt),
		contract.OpReact:        p.chatOp(p.opReact),
		contract.OpDelete:       p.chatOp(p.opDelete),
		contract.OpThreadCreate: p.chatOp(p.opThreadCreate),
		contract.OpThreadRename: p.chatOp(p.opThreadRename),
	}
}

// Execute implements platform.Platform. Chat-addressed ops are re-checked
// against the caller's tenant (a foreign or unknown chat gets the uniform
// structured decline); every REST call runs under ctx (RequestTimeout when
// ctx has no deadline) and counts against the tenant's fair share.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	h, ok := p.ops[a.Op]
	if !ok {
		return contract.Failed(contract.CodeUnsupportedOp, "discord does not support op "+textsplit.Truncate(a.Op, 40))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.RequestTimeout)
		defer cancel()
	}
	return h(platform.WithTenant(ctx, tenant), tenant, a)
}

// chatOp wraps an op addressed to a chat: the chat id must be a Discord id
// and belong to the tenant (ChatTenant, from the cache only). Until the
// owners are known the answer is unavailable (retryable), never the decline.
func (p *Platform) chatOp(h opHandler) opHandler {
	return func(ctx context.Context, tenant string, a *contract.Action) contract.Result {
		chatID := string(a.ChatID)
		if !isSnowflake(chatID) {
			return contract.Failed(contract.CodeBadRequest, "chat_id is not a Discord channel id")
		}
		if p.ChatGranted(chatID, tenant) {
			return h(ctx, tenant, a) // a bound author of the tenant spoke there
		}
		owner, err := p.ChatTenant(ctx, chatID)
		if errors.Is(err, platform.ErrUnavailable) {
			return ownerUnavailableResult(err)
		}
		if err != nil || owner != tenant {
			return contract.Declined(platformName)
		}
		return h(ctx, tenant, a)
	}
}
