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

// channelOf makes a chat_id into the channel id ops act on: a snowflake.
func channelOf(_ *Platform, chatID string) (string, bool) { return chatID, isSnowflake(chatID) }

// Execute implements platform.Platform through platform.Execute: a
// chat-addressed op needs a Discord channel id the tenant may act in; every
// REST call runs under ctx (RequestTimeout when ctx has no deadline) and
// counts against the tenant's fair share.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	return platform.Execute(ctx, &p.egress, p, tenant, a)
}
