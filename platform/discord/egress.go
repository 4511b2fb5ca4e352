package discord

import (
	"context"

	"connector/contract"
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

// Execute implements platform.Platform. A chat-addressed op needs a Discord
// channel id (else bad_request) the tenant may act in (platform.Authorize);
// every REST call runs under ctx (RequestTimeout when ctx has no deadline)
// and counts against the tenant's fair share.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	h, ok := ops[a.Op]
	if !ok {
		return platform.Unsupported(platformName)
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
	if !isSnowflake(chatID) {
		return contract.Failed(contract.CodeBadRequest, "chat_id is not a Discord channel id")
	}
	if r, ok := platform.Authorize(ctx, p, tenant, chatID); !ok {
		return r
	}
	return h(p, ctx, tenant, chatID, a)
}
