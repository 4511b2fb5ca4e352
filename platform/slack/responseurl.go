package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

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

// takeResponseURL returns the response_url kept for tenant's session and
// what is kept beside it.
func (p *Platform) takeResponseURL(ctx context.Context, tenant, sessionKey string) (ref responseRef, u string, ok bool) {
	e, ok := p.deps.Vault.Get(ctx, vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL})
	if !ok {
		return responseRef{}, "", false
	}
	return parseResponseRef(e.Ref), e.Value.Reveal(), true
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

// postJSON posts body as JSON to a Slack URL (a response_url): an https
// URL on slack.com or a subdomain, or on the Web API's own host (a fake's
// in tests). Anything else is refused, so a stored URL can never make the
// connector post elsewhere.
func (p *Platform) postJSON(ctx context.Context, raw string, body map[string]any) (*http.Response, error) {
	u, err := url.Parse(raw)
	if err != nil || !p.slackURL(u) {
		return nil, errors.New("slack: the response_url is not a Slack URL")
	}
	data, _ := json.Marshal(body) // strings and booleans: cannot fail
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return p.http.Do(req)
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
