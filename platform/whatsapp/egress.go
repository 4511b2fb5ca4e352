package whatsapp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/pace"
	"connector/vault"
)

// chat is what an op acts on: the user (wa_id) and the business number
// the tenant's conversation with them goes through.
type chat struct {
	user   string
	number string
	last   string    // the user's latest message id, "" when unknown
	wrote  time.Time // when the user last wrote to number, zero when unknown
}

// serviceWindow is Meta's customer-service window: a message other than
// an approved template reaches a user only this long after they last
// wrote to the business number. Meta accepts such a message past it all
// the same and reports 131047 later, in a failed delivery status, so the
// window is checked before the message is sent.
const serviceWindow = 24 * time.Hour

// windowed are the ops that send the user a message, which the
// customer-service window bounds.
var windowed = map[string]bool{contract.OpSend: true, contract.OpPrompt: true, contract.OpReact: true, contract.OpSendMedia: true}

// handlers is the egress table; the descriptor's supported_ops are its
// keys. edit, delete, thread_* and draft do not exist on the Cloud API.
var handlers = platform.Ops[*Platform, chat]{
	contract.OpSend:        (*Platform).send,
	contract.OpPrompt:      (*Platform).prompt,
	contract.OpReact:       (*Platform).react,
	contract.OpSendMedia:   (*Platform).sendMedia,
	contract.OpTyping:      (*Platform).typing,
	contract.OpGetChatInfo: (*Platform).getChatInfo,
}

// callMargin is kept free before a request's deadline for the Graph call
// that follows a wait.
const callMargin = time.Second

// newEgress is the platform's egress: a chat_id is a user's wa_id, and
// each op of handlers goes out from the business number of the tenant's
// conversation with that user (sender), resolved once the user is
// authorized.
func newEgress(timeout time.Duration) platform.Egress[*Platform, string] {
	ops := make(platform.Ops[*Platform, string], len(handlers))
	for name, h := range handlers {
		ops[name] = func(p *Platform, ctx context.Context, tenant, user string, a *contract.Action) contract.Result {
			c, ok, err := p.sender(ctx, tenant, user)
			switch {
			case err != nil: // the store went since Authorize
				return platform.OwnerUnknown(platformName, err)
			case !ok: // the bindings changed since Authorize
				return contract.Declined(platformName)
			}
			if windowed[name] && !c.wrote.IsZero() && p.deps.Clock.Now().Sub(c.wrote) >= serviceWindow {
				return windowClosed("whatsapp_cloud " + name + ": ")
			}
			return h(p, ctx, tenant, c, a)
		}
	}
	return platform.Egress[*Platform, string]{
		Ops:     ops,
		Chat:    func(_ *Platform, user string) (string, bool) { return user, platform.ValidWhatsAppID(user) },
		Timeout: timeout,
	}
}

// Execute implements platform.Platform through platform.Execute: an op
// needs a wa_id the tenant may act on (Authorize, ChatTenant) and goes out
// from the business number sender names.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	return platform.Execute(ctx, &p.egress, p, tenant, a)
}

// paced runs call for one message from number to user: it waits until
// Meta's throttles of tenant end (throttled) and for the user's slot
// (platform/pace), then for tenant's fair share of the number's budget and
// of the app's, then calls. A Graph rate-limit answer (rateLimitCodes)
// holds, with a backoff doubling with each answer in a row, what Meta
// throttled as far as it is the tenant's: the user (the pair limit,
// 131056), the tenant's sends from the number (130429), or all of the
// tenant's sends (the app and account codes 4, 80007, 613). Those limits
// are shared, and the answer goes to the tenant sending; holding it alone
// keeps one tenant flooding from pausing the others, whose sends are
// answered on their own. The message is sent again while the deadline
// allows, since Meta did not take it. Any other error is returned as it
// is, never retried: the call may have gone through.
func (p *Platform) paced(ctx context.Context, tenant, number, user string, call func(context.Context) error) error {
	latest := platform.LatestStart(ctx, p.deps.Clock, p.cfg.RequestTimeout, callMargin)
	held := p.heldAs(tenant)
	key, scopes := number+"/"+user, [...]string{held, number + "/" + held}
	for {
		now := p.deps.Clock.Now()
		from := now
		for _, scope := range scopes {
			if until, _ := p.throttled.Reserve(scope, now, latest); until.After(from) {
				from = until
			}
		}
		at, ok := p.pace.Reserve(key, from, latest)
		if !ok {
			return &platform.RateLimitedError{Wait: at.Sub(now)}
		}
		if err := p.deps.Clock.Sleep(ctx, at.Sub(now)); err != nil {
			return err
		}
		numberBudget := p.numberBudget(number)
		if err := platform.WaitShare(ctx, numberBudget, tenant, latest, p.deps.Clock); err != nil {
			return err
		}
		if err := platform.WaitShare(ctx, p.budget, tenant, latest, p.deps.Clock); err != nil {
			return err
		}
		if d := p.deps.Clock.Now().Sub(now); d > 0 {
			p.deps.Metrics.RateLimitWait(platformName, d)
		}
		err := call(ctx)
		p.noteToken(err)
		ge, limited := rateLimited(err)
		if !limited {
			if err == nil {
				p.pace.Passed(key)
				for _, scope := range scopes {
					p.throttled.Passed(scope)
				}
			}
			return err
		}
		p.deps.Metrics.RateLimited(platformName)
		var hold time.Duration
		switch now := p.deps.Clock.Now(); ge.Code {
		case codePairRate:
			hold = p.pace.Backoff(key, now)
		case codeNumberThroughput:
			hold = p.throttled.Backoff(scopes[1], now)
		default: // the app or the account
			hold = p.throttled.Backoff(scopes[0], now)
		}
		p.log.Info("whatsapp rate limited; backing off", "tenant", tenant, "code", ge.Code, "hold", hold)
	}
}

// appCall makes a Graph call that is not a message (the read mark, a
// media upload) from c's number once one unit of tenant's fair share of
// the app's budget comes: a RateLimitedError when none comes in time for
// the call (LatestStart). As post does, the call goes out only while
// tenant may still act on the user from that number (mayAct): a number
// bound to another tenant, or a link ended, while it waited declines it
// (errRebound). It waits out Meta's app or account throttle of tenant
// (throttled, as paced holds its messages).
func (p *Platform) appCall(ctx context.Context, tenant string, c chat, call func(context.Context) error) error {
	latest := platform.LatestStart(ctx, p.deps.Clock, p.cfg.RequestTimeout, callMargin)
	now := p.deps.Clock.Now()
	until, ok := p.throttled.Reserve(p.heldAs(tenant), now, latest)
	if !ok {
		return &platform.RateLimitedError{Wait: until.Sub(now)}
	}
	if err := p.deps.Clock.Sleep(ctx, until.Sub(now)); err != nil {
		return err
	}
	if err := platform.WaitShare(ctx, p.budget, tenant, latest, p.deps.Clock); err != nil {
		return err
	}
	if !p.mayAct(tenant, c.user, c.number) {
		return errRebound
	}
	err := call(ctx)
	p.noteToken(err)
	return err
}

// heldAs is tenant's key in throttled: the tenant as created
// (vault.Creation), so a tenant deleted and made again under its id
// starts unheld.
func (p *Platform) heldAs(tenant string) string {
	return tenant + "\x00" + vault.Creation(p.vault, tenant).Format(time.RFC3339Nano)
}

// failure turns an egress error into a result whose text carries no
// secret: the uniform decline for a conversation the tenant lost while
// the message waited (errRebound), the window's own code, rate_limited
// with a hint, unavailable for what may be retried (no answer, the
// network, Meta's 5xx), platform_error for the rest, with Meta's code and
// message.
func (p *Platform) failure(op string, err error) contract.Result {
	var ge *GraphError
	prefix := "whatsapp_cloud " + op + ": "
	if r, ok := platform.CommonFailure(prefix, "the Graph API", err); ok {
		return r
	}
	switch {
	case errors.Is(err, errRebound):
		return contract.Declined(platformName)
	case errors.As(err, &ge) && ge.Code == codeReengagement:
		return windowClosed(prefix)
	case errors.As(err, &ge) && rateLimitCodes[ge.Code]:
		r := contract.Failed(contract.CodeRateLimited, prefix+p.errorText(ge))
		r.RetryAfterMS = pace.BackoffMin.Milliseconds()
		return r
	case errors.As(err, &ge) && ge.Status >= http.StatusInternalServerError:
		return contract.Failed(contract.CodeUnavailable, prefix+p.errorText(ge))
	case errors.As(err, &ge):
		return contract.Failed(contract.CodePlatformError, prefix+p.errorText(ge))
	}
	return contract.Failed(contract.CodePlatformError, prefix+p.errorText(err))
}

// errRebound fails a message whose conversation the tenant could no
// longer act in once its turn came (post).
var errRebound = errors.New("whatsapp: the conversation is no longer the tenant's")

// windowClosed is the result of a message the 24-hour customer-service
// window refuses.
func windowClosed(prefix string) contract.Result {
	return contract.Failed(contract.CodeWindowClosed, prefix+"the 24-hour customer-service window is closed: the user last wrote more than 24 hours ago, so WhatsApp delivers only approved templates until they write again (Graph error 131047)")
}
