package slack

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"
)

// This file is the OAuth v2 install flow that distributes the app to
// many workspaces:
//
//	GET /slack/install         302 to Slack's authorize page, with a
//	                           signed single-use state, also set as an
//	                           HttpOnly cookie of the browser that asked
//	GET /slack/oauth/callback  checks the state (signature, expiry, the
//	                           same browser's cookie, first use across
//	                           instances), exchanges the code
//	                           (oauth.v2.access) and stores the
//	                           workspace's bot token and bot user
//
// An install gives the app a workspace's credential, never a tenant: the
// workspace reaches a tenant through slack.teams, an admin binding or its
// users' /link, as any workspace does. So a stranger installing the app
// in their own workspace reaches nobody.

// stateTTL is how long an install's state is good for.
const stateTTL = 10 * time.Minute

// stateCookie carries the state to the callback in the browser that began
// the install.
const stateCookie = "slack_oauth_state"

// stateKey is the HMAC key of the states: derived from the client secret,
// which every instance shares.
func (p *Platform) stateKey() []byte {
	k := sha256.Sum256([]byte("connector slack oauth state\x00" + p.cfg.ClientSecret))
	return k[:]
}

// newState is a state: a random nonce, its expiry and their MAC.
func (p *Platform) newState() string {
	b := make([]byte, 16+8, 16+8+sha256.Size)
	_, _ = rand.Read(b[:16]) // crypto/rand.Read never fails
	binary.BigEndian.PutUint64(b[16:], uint64(p.clock.Now().Add(stateTTL).Unix()))
	mac := hmac.New(sha256.New, p.stateKey())
	mac.Write(b)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(b))
}

// checkState verifies a state's MAC and expiry and returns its nonce and
// expiry.
func (p *Platform) checkState(state string) (string, time.Time, error) {
	b, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil || len(b) != 16+8+sha256.Size {
		return "", time.Time{}, errors.New("malformed state")
	}
	mac := hmac.New(sha256.New, p.stateKey())
	mac.Write(b[:24])
	if !hmac.Equal(mac.Sum(nil), b[24:]) {
		return "", time.Time{}, errors.New("state signature mismatch")
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(b[16:24])), 0)
	if !p.clock.Now().Before(exp) {
		return "", time.Time{}, errors.New("state expired")
	}
	return base64.RawURLEncoding.EncodeToString(b[:16]), exp, nil
}

// authorizeURL is Slack's authorize page, beside the Web API (a fake's in
// tests).
func (p *Platform) authorizeURL() string {
	return strings.TrimSuffix(strings.TrimSuffix(p.cfg.APIURL, "/"), "/api") + "/oauth/v2/authorize"
}

// serveInstall handles GET /slack/install.
func (p *Platform) serveInstall(w http.ResponseWriter, r *http.Request) {
	state := p.newState()
	q := url.Values{"client_id": {p.cfg.ClientID}, "scope": {strings.Join(p.cfg.Scopes, ",")}, "state": {state}}
	if p.cfg.RedirectURL != "" {
		q.Set("redirect_uri", p.cfg.RedirectURL)
	}
	http.SetCookie(w, &http.Cookie{
		Name: stateCookie, Value: state, Path: OAuthCallbackPath, MaxAge: int(stateTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil || strings.HasPrefix(p.cfg.RedirectURL, "https:"), SameSite: http.SameSiteLaxMode,
	})
	http.Redirect(w, r, p.authorizeURL()+"?"+q.Encode(), http.StatusFound)
}

// serveOAuthCallback handles GET /slack/oauth/callback. Answers: 200 the
// workspace is installed; 400 a state that is malformed, forged, expired,
// used, or not this browser's, a denied install, or a code Slack refuses;
// 503 when the store or Slack could not be reached.
func (p *Platform) serveOAuthCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		p.oauthPage(w, http.StatusBadRequest, "The app was not installed: "+html.EscapeString(e)+".")
		return
	}
	state := q.Get("state")
	nonce, exp, err := p.checkState(state)
	c, cerr := r.Cookie(stateCookie)
	if err == nil && (cerr != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) != 1) {
		err = errors.New("the state is not this browser's")
	}
	if err != nil {
		p.metrics.Dropped(platformName, "oauth_state")
		p.log.Info("slack oauth callback refused", "reason", err.Error())
		p.oauthPage(w, http.StatusBadRequest, "This install link is not valid (expired, used, or from another browser). Start again at "+InstallPath+".")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: "", Path: OAuthCallbackPath, MaxAge: -1})
	// A state is single-use whatever comes of its code, for its whole life
	// (not slack.dedupe_window, which may be shorter): its claim is never
	// released and lasts until the state expires.
	switch taken, err := p.claims.Claim(r.Context(), "slack/oauth/"+nonce, exp); {
	case err != nil:
		p.oauthPage(w, http.StatusServiceUnavailable, "The install could not be recorded; try again.")
		return
	case !taken:
		p.metrics.Dropped(platformName, "oauth_state")
		p.oauthPage(w, http.StatusBadRequest, "This install link was already used. Start again at "+InstallPath+".")
		return
	}
	resp, err := slack.GetOAuthV2ResponseContext(r.Context(), p.http, p.cfg.ClientID, p.cfg.ClientSecret,
		q.Get("code"), p.cfg.RedirectURL, slack.OAuthOptionAPIURL(p.cfg.APIURL))
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se):
		p.log.Info("slack oauth code refused", "err", p.errorText(err))
		p.oauthPage(w, http.StatusBadRequest, "Slack refused the install ("+html.EscapeString(se.Err)+"). Start again at "+InstallPath+".")
		return
	case err != nil:
		p.log.Warn("slack oauth.v2.access failed", "err", p.errorText(err))
		p.oauthPage(w, http.StatusServiceUnavailable, "Slack could not be reached; try again.")
		return
	case !strings.HasPrefix(resp.AccessToken, "xoxb-") || !teamIDPattern.MatchString(resp.Team.ID) || resp.BotUserID == "":
		p.log.Warn("slack oauth answered no bot token for a workspace", "team", resp.Team.ID)
		p.oauthPage(w, http.StatusBadRequest, "Slack answered no bot token for a workspace.")
		return
	}
	rec := installRecord{Token: resp.AccessToken, BotUser: resp.BotUserID, AppID: resp.AppID, TeamName: resp.Team.Name, Installed: p.clock.Now().Unix()}
	if err := p.works.install(r.Context(), resp.Team.ID, rec); err != nil {
		p.log.Error("slack install not stored", "team", resp.Team.ID, "err", err)
		p.oauthPage(w, http.StatusServiceUnavailable, "The install could not be stored; try again.")
		return
	}
	p.log.Info("slack workspace installed", "team", resp.Team.ID, "team_name", resp.Team.Name, "tenant", p.teamTenant(resp.Team.ID))
	p.oauthPage(w, http.StatusOK, fmt.Sprintf("The app is installed in %s. Its messages reach a tenant once the workspace is bound to one.", html.EscapeString(resp.Team.Name)))
}

// oauthPage answers the browser with a short page.
func (p *Platform) oauthPage(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><title>Slack install</title><p>%s</p>\n", text)
}
