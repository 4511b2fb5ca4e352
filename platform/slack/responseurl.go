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

// takeResponseURL returns the response_url kept for tenant's session and
// how many posts it took so far.
func (p *Platform) takeResponseURL(tenant, sessionKey string) (used int, u string, ok bool) {
	e, ok := p.deps.Vault.Get(vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL})
	if !ok {
		return 0, "", false
	}
	used, _ = strconv.Atoi(e.Ref)
	return used, e.Value.Reveal(), true
}

// usedResponseURL records that tenant's response_url took used posts; it
// keeps its expiry.
func (p *Platform) usedResponseURL(tenant, sessionKey string, used int) {
	k := vault.Key{Tenant: tenant, SessionKey: sessionKey, Kind: kindResponseURL}
	e, ok := p.deps.Vault.Get(k)
	if !ok {
		return
	}
	e.Ref = strconv.Itoa(used)
	if err := p.deps.Vault.Put(k, e); err != nil {
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
