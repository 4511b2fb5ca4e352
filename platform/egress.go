package platform

import (
	"context"
	"errors"
	"maps"
	"slices"

	"connector/contract"
)

// Op performs one outbound op of platform P for tenant on chat: what the
// platform resolved the action's chat_id to (a Discord channel id, a
// Telegram chat id, a nexscope room), already authorized for the tenant
// (Authorize); the zero T for an op addressed to no chat (follow_up).
type Op[P, T any] func(p P, ctx context.Context, tenant string, chat T, a *contract.Action) contract.Result

// Ops is a platform's egress table; its keys are the descriptor's
// supported_ops.
type Ops[P, T any] map[string]Op[P, T]

// Names lists the table's ops, sorted.
func (o Ops[P, T]) Names() []string { return slices.Sorted(maps.Keys(o)) }

// Unsupported is the result of an op outside platform name's table.
func Unsupported(name string) contract.Result {
	return contract.Failed(contract.CodeUnsupportedOp, name+" does not support this op")
}

// Authorize is the one check that tenant may act in chatID on p, made by
// p's Execute before a chat-addressed op: p grants it the chat (ChatGranter)
// or ChatTenant, asked on its behalf (WithTenant), names it. Otherwise it
// returns false and the result to answer: OwnerUnknown when either's
// error wraps ErrUnavailable, else the uniform decline.
func Authorize(ctx context.Context, p Platform, tenant, chatID string) (contract.Result, bool) {
	ctx = WithTenant(ctx, tenant)
	if g, ok := p.(ChatGranter); ok {
		granted, err := g.ChatGranted(ctx, chatID, tenant)
		switch {
		case errors.Is(err, ErrUnavailable):
			return OwnerUnknown(p.Name(), err), false
		case granted:
			return contract.Result{}, true
		}
	}
	owner, err := p.ChatTenant(ctx, chatID)
	switch {
	case errors.Is(err, ErrUnavailable):
		return OwnerUnknown(p.Name(), err), false
	case err != nil || owner != tenant:
		return contract.Declined(p.Name()), false
	}
	return contract.Result{}, true
}

// UnavailableError is an error wrapping ErrUnavailable whose text is safe
// to show a gateway as it is (it names no address, token or transport
// detail): OwnerUnknown answers with it.
type UnavailableError string

// Error implements error.
func (e UnavailableError) Error() string { return string(e) }

// Unwrap makes the error wrap ErrUnavailable.
func (UnavailableError) Unwrap() error { return ErrUnavailable }

// OwnerUnknown answers an action on platform name whose chat owner could
// not be looked up (err wraps ErrUnavailable): the retryable unavailable,
// saying nothing about whose the chat is, in err's text when it is an
// UnavailableError and never in the transport error's.
func OwnerUnknown(name string, err error) contract.Result {
	var u UnavailableError
	if errors.As(err, &u) {
		return contract.Failed(contract.CodeUnavailable, string(u))
	}
	return contract.Failed(contract.CodeUnavailable, name+": the chat's owner could not be looked up; retry later")
}
