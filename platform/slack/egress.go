package slack

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/platform"
)

// target is the conversation an op acts in: a channel of a workspace
// whose token the op uses.
type target struct {
	team, channel string
}

// handlers is the egress table; the descriptor's supported_ops are the
// keys of the platform's Egress (newEgress). thread_rename is not in it: Slack threads have no names,
// so it answers unsupported_op.
var handlers = platform.Ops[*Platform, target]{
	contract.OpSend:         (*Platform).send,
	contract.OpEdit:         (*Platform).edit,
	contract.OpDelete:       (*Platform).deleteMessage,
	contract.OpReact:        (*Platform).react,
	contract.OpGetChatInfo:  (*Platform).getChatInfo,
	contract.OpThreadCreate: (*Platform).threadCreate,
	contract.OpPrompt:       (*Platform).prompt,
	contract.OpSendMedia:    (*Platform).sendMedia,
	contract.OpFollowUp:     (*Platform).followUp,
	contract.OpTyping:       (*Platform).typing,
	contract.OpDraft:        (*Platform).draft,
}

// assistantOps need Slack's Agents & AI Apps feature (Config.Assistant).
var assistantOps = []string{contract.OpTyping, contract.OpDraft}

// newEgress is the platform's egress: a chat_id is a Slack conversation
// id, and each op of handlers (without typing and draft when the app
// lacks the assistant feature) acts with the token of the workspace
// teamFor picks, once the chat is authorized; follow_up, addressed by its
// session, with none.
func newEgress(assistant bool, timeout time.Duration) platform.Egress[*Platform, string] {
	ops := make(platform.Ops[*Platform, string], len(handlers))
	for name, h := range handlers {
		if !assistant && slices.Contains(assistantOps, name) {
			continue
		}
		ops[name] = func(p *Platform, ctx context.Context, tenant, chat string, a *contract.Action) contract.Result {
			if !contract.AddressesChat(a.Op) {
				return h(p, ctx, tenant, target{}, a)
			}
			team, err := p.teamFor(ctx, tenant, chat, string(a.Metadata.ScopeID))
			if err != nil {
				return p.failure(a.Op, err)
			}
			return h(p, ctx, tenant, target{team: team, channel: chat}, a)
		}
	}
	return platform.Egress[*Platform, string]{
		Ops:     ops,
		Chat:    func(_ *Platform, chat string) (string, bool) { return chat, channelIDPattern.MatchString(chat) },
		Timeout: timeout,
	}
}

// Execute implements platform.Platform through platform.Execute: an op
// needs a Slack conversation id the tenant may act in (Authorize:
// ChatGranted, ChatTenant), and runs under ctx (request_timeout when ctx
// has no deadline) with the token of the chat's workspace.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	return platform.Execute(ctx, &p.egress, p, tenant, a)
}

// teamFor picks the workspace whose token acts in chat for tenant (who
// may act there: Authorize said so): the workspace the gateway names
// (metadata.scope_id, echoed from the chat's inbound) when it is the
// tenant's, else one of the tenant's the chat was seen in, else the one
// the gateway names when the chat was seen in it, else one the chat was
// seen in, else one of the tenant's that has it, else bot_token's. So in
// a Slack Connect channel a tenant acts with its own installation's
// token, never with another tenant's (an inbound's scope_id is its
// author's workspace, which may be the other tenant's).
func (p *Platform) teamFor(ctx context.Context, tenant, chat, hint string) (string, error) {
	seen := p.channelTeams(chat)
	if hint != "" && p.teamTenant(hint) == tenant {
		return hint, nil
	}
	for _, team := range seen {
		if p.teamTenant(team) == tenant {
			return team, nil
		}
	}
	switch {
	case hint != "" && slices.Contains(seen, hint):
		return hint, nil
	case len(seen) > 0:
		return seen[0], nil
	}
	team, err := p.probeChannel(ctx, tenant, chat)
	if err != nil {
		return "", err
	}
	if team = cmp.Or(team, p.works.configTeam()); team == "" {
		return "", errNotInstalled
	}
	return team, nil
}

// failure turns an egress error into a result whose text carries no
// secret.
func (p *Platform) failure(op string, err error) contract.Result {
	if r, ok := platform.CommonFailure("slack "+op+": ", "Slack", err); ok {
		return r
	}
	switch {
	case errors.Is(err, errNotInstalled):
		return contract.Failed(contract.CodeUnavailable, "slack "+op+": the app is not installed in this chat's workspace")
	case errors.Is(err, platform.ErrUnavailable):
		return platform.OwnerUnknown(platformName, err)
	}
	return contract.Failed(contract.CodePlatformError, "slack "+op+": "+p.errorText(err))
}

// slackErr reports Slack's error code of err ("" when it is none).
func slackErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// threadOf is the thread_ts an op posts into (_resolve_thread_ts): the
// gateway's metadata.thread_id (or thread_ts) over reply_to. With the
// tenant's reply_in_thread off, a top-level message's own ts (its synthetic
// thread, which the gateway echoes as both) is no thread: the reply goes
// flat.
func (p *Platform) threadOf(tenant string, a *contract.Action) string {
	thread := cmp.Or(string(a.Metadata.ThreadID), string(a.Metadata.ThreadTS))
	if !p.policy(tenant).replyInThread {
		if thread == string(a.ReplyTo) {
			return ""
		}
		return thread
	}
	if thread != "" {
		return thread
	}
	return strings.TrimSpace(string(a.ReplyTo))
}
