package platform

import (
	"context"
	"maps"
	"slices"

	"connector/contract"
)

// Op performs one outbound op of platform P for tenant on chat: what the
// platform resolved the action's chat_id to (a Discord channel id, a
// Telegram chat id, a nexscope room), already checked to be the tenant's;
// the zero T for an op addressed to no chat (follow_up).
type Op[P, T any] func(p P, ctx context.Context, tenant string, chat T, a *contract.Action) contract.Result

// Ops is a platform's egress table; its keys are the descriptor's
// supported_ops.
type Ops[P, T any] map[string]Op[P, T]

// Names lists the table's ops, sorted.
func (o Ops[P, T]) Names() []string { return slices.Sorted(maps.Keys(o)) }
