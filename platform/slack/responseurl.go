package slack

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/pytext"
	"connector/platform"
	"connector/vault"
)

// kindResponseURL is the vault kind of a slash command's response_url.
const kindResponseURL = vault.KindSlackResponseURL

// responseRef is what the vault keeps beside a response_url (its entry's
// Ref): how many posts it took, and the command's workspace, channel and
// user, for the ephemeral messages that follow the fifth post.
type responseRef struct {
	used                int
	team, channel, user string
}

func (r responseRef) String() string {
	return strings.Join([]string{strconv.Itoa(r.used), r.team, r.channel, r.user}, " ")
}

func parseResponseRef(s string) responseRef {
	f := strings.Fields(s)
	var r responseRef
	if len(f) > 0 {
		r.used, _ = strconv.Atoi(f[0])
	}
	if len(f) == 4 {
		r.team, r.channel, r.user = f[1], f[2], f[3]
	}
	return r
}

// takeResponseURL returns the response_url kept for tenant's session,
// what is kept beside it and when it was stored.
func (p *Platform) takeResponseURL(ctx context.Context, tenant, sessionKey string) (ref responseRef, u string, stored time.Time, ok bool) {
	e, ok := p.deps.Vault.Get(ctx, vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL})
	if !ok {
		return responseRef{}, "", time.Time{}, false
	}
	return parseResponseRef(e.Ref), e.Value.Reveal(), e.Stored, true
}

// claimPosts claims up to n of the posts left to response_url u, stored
// at stored for tenant's session, from post used on, and returns their
// indexes (0 is the post that replaces the acknowledgement). Each post is
// a claim until the response_url expires, so follow_ups and replies
// running at once, on any instance, never take more than Slack's five
// between them (the use count in the vault only says where to look
// first). A claim the store did not answer is taken all the same: Slack
// refuses a sixth post itself.
func (p *Platform) claimPosts(ctx context.Context, tenant, sessionKey, u string, stored time.Time, used, n int) []int {
	digest := sha256.Sum256([]byte(u))
	prefix := "slack/response-post/" + tenant + "/" + sessionKey + "/" + hex.EncodeToString(digest[:16]) + "/"
	ttl, _ := kindResponseURL.TTL()
	var posts []int
	for ; used < maxResponseURLPosts && len(posts) < n; used++ {
		if took, err := p.claims.Claim(ctx, prefix+strconv.Itoa(used), stored.Add(ttl)); took || err != nil {
			posts = append(posts, used)
		}
	}
	return posts
}

// slashReplyWindow is how long after a slash command the first reply of
// its session goes to the command's user alone (the native
// _SLASH_CTX_TTL: response_url lives 30 minutes, but a reply that late is
// not the command's).
const slashReplyWindow = 120 * time.Second

// slashReply answers the send a gateway makes in reply to a slash command
// as the native adapter does (_send_slash_reply; docs/contract.md): to
// its user alone, through the command's response_url, else with
// chat.postEphemeral, never as a public post. ok is false when a is not
// such a reply; the send then posts as any other. The send names no
// session, so the reply is known by what it carries: no reply anchor, and
// the chat, workspace, thread and author of a command whose response_url
// the vault holds for the tenant, delivered within slashReplyWindow and
// not answered yet (a claim, so one instance answers it). The response_url
// stays in the vault; no frame ever carries it.
func (p *Platform) slashReply(ctx context.Context, tenant string, t target, a *contract.Action) (contract.Result, bool) {
	user := string(a.Metadata.UserID)
	if user == "" || strings.TrimSpace(string(a.ReplyTo)) != "" || a.Metadata.MessageID != "" || a.Metadata.ReplyToMessageID != "" {
		return contract.Result{}, false
	}
	src := slashSource(t.channel, user, cmp.Or(string(a.Metadata.ThreadID), string(a.Metadata.ThreadTS)), cmp.Or(string(a.Metadata.ScopeID), t.team))
	sessionKey := p.deps.Key(tenant, &src)
	k := vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL}
	e, ok := p.deps.Vault.Get(ctx, k)
	ref := parseResponseRef(e.Ref)
	if !ok || ref.user != user || ref.channel != t.channel || p.clock.Now().Sub(e.Stored) >= slashReplyWindow {
		return contract.Result{}, false
	}
	// The command is named by a digest of its response_url (unique to it,
	// and never the secret itself).
	digest := sha256.Sum256([]byte(e.Value.Reveal()))
	claim := "slack/slash-reply/" + tenant + "/" + sessionKey + "/" + hex.EncodeToString(digest[:16])
	c, err := platform.AwaitClaim(ctx, p.claims, p.clock, claim, func() time.Time { return e.Stored.Add(slashReplyWindow) }, 0, nil)
	switch {
	case errors.Is(err, platform.ErrClaimHeld):
		return contract.Result{}, false // answered already (on another instance)
	case err != nil:
		// Answered as the command's reply all the same: a private reply
		// must not become public because the store did not answer.
		p.log.Warn("slack slash reply claim not stored; answering it privately", "err", err)
	}
	r := p.privateReply(ctx, tenant, t.team, sessionKey, ref, e.Value.Reveal(), e.Stored, a.Content)
	if !r.Success { // not answered: the gateway's retry is the command's reply too
		if err := c.Release(storeTimeout); err != nil {
			p.log.Warn("slack slash reply claim not released; until the reply window ends, a retry of the reply is not posted privately", "err", err)
		}
	}
	return r, true
}

// privateReply posts content to the command's user alone: through its
// response_url while it takes posts, the first replacing the
// acknowledgement, the parts beyond its remaining posts cut with a notice;
// if a post fails, it and the parts after it with chat.postEphemeral (with workspace
// team's token: the tenant's, teamFor) instead; if that fails too, the
// result fails (nothing is posted publicly), or, once a part went out,
// succeeds saying what was not sent (platform.SendParts: a resend would
// post the sent parts again).
func (p *Platform) privateReply(ctx context.Context, tenant, team, sessionKey string, ref responseRef, url string, stored time.Time, content string) contract.Result {
	parts := mrkdwnParts(content)
	slots := p.claimPosts(ctx, tenant, sessionKey, url, stored, ref.used, len(parts))
	room := len(slots)
	if room > 0 {
		defer p.usedResponseURL(context.WithoutCancel(ctx), tenant, sessionKey, slots[room-1]+1)
	}
	_, _, r := platform.SendParts(ctx, parts, func(i int, part string) (string, error) {
		if i < room {
			text := part
			if i == room-1 && len(parts) > room {
				text = strings.TrimRightFunc(text, pytext.IsSpace) +
					"\n\n_[Reply truncated: " + strconv.Itoa(len(parts)-room) + " more part(s) exceeded Slack's ephemeral reply limit.]_"
			}
			err := p.postResponseURL(ctx, url, &slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: slots[i] == 0, Text: text})
			if err == nil {
				return "", nil
			}
			p.log.Warn("slack response_url reply failed; posting the rest ephemerally", "err", p.errorText(err))
			room = 0
		} else if room > 0 {
			return "", nil // cut: the last post said so
		}
		return "", p.callIn(ctx, team, ref.channel, "chat.postEphemeral", func(ctx context.Context, c *slack.Client) error {
			_, err := c.PostEphemeralContext(ctx, ref.channel, ref.user, slack.MsgOptionText(part, false))
			return err
		})
	}, func(err error) contract.Result { return p.failure(contract.OpSend, err) })
	return r
}

// usedResponseURL records that tenant's response_url took used posts; it
// keeps its expiry.
func (p *Platform) usedResponseURL(ctx context.Context, tenant, sessionKey string, used int) {
	k := vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL}
	e, ok := p.deps.Vault.Get(ctx, k)
	if !ok {
		return
	}
	ref := parseResponseRef(e.Ref)
	ref.used = used
	e.Ref = ref.String()
	if err := p.deps.Vault.Put(ctx, k, e); err != nil {
		p.log.Warn("slack response_url use count not stored", "err", err)
	}
}

// postResponseURL posts msg to a response_url: an https URL on slack.com
// or a subdomain, or on the Web API's own host (a fake's in tests).
// Anything else is refused, so a stored URL can never make the connector
// post elsewhere. The URL is a capability: an error never names it.
func (p *Platform) postResponseURL(ctx context.Context, raw string, msg *slack.WebhookMessage) error {
	if u, err := url.Parse(raw); err != nil || !p.slackURL(u) {
		return errors.New("slack: the response_url is not a Slack URL")
	}
	err := slack.PostWebhookCustomHTTPContext(ctx, raw, p.http, msg)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return fmt.Errorf("slack: post to the response_url: %w", &url.Error{Op: ue.Op, URL: "(response_url)", Err: ue.Err})
	}
	return err
}

// slackURL reports whether u is an https URL on slack.com (or a
// subdomain), or on the Web API's scheme and host.
func (p *Platform) slackURL(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	if u.Scheme == "https" && (host == "slack.com" || strings.HasSuffix(host, ".slack.com")) {
		return true
	}
	api, err := url.Parse(p.cfg.APIURL)
	return err == nil && api.Host != "" && u.Scheme == api.Scheme && strings.EqualFold(u.Host, api.Host)
}
