package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"connector/internal/ttlcache"
)

// This file owns the workspaces' credentials: the bot_token's workspace
// (its team and bot user from auth.test), and every workspace installed
// through OAuth, whose bot token and bot user the store keeps (Registry
// namespace slack/installs), so every instance serves every workspace and
// an install survives restarts. Tokens never reach a log, an error, a
// metric or a frame; like the vault's values they are kept in clear in
// the store, which must be protected as the app's own credentials are
// (docs/durability.md).

// installsNamespace is the store Registry namespace of the installs.
const installsNamespace = "slack/installs"

// Caching of installs read from the store: a found install is read again
// after installCacheTTL (an uninstall on another instance shows within
// it), a missing one after missCacheTTL.
const (
	installCacheTTL  = 30 * time.Second
	missCacheTTL     = 5 * time.Second
	installCacheSize = 10_000
	storeTimeout     = 5 * time.Second
)

// errNotInstalled is returned for a workspace the app has no token for.
var errNotInstalled = errors.New("slack: the app is not installed in this workspace")

// installRecord is a workspace installed through OAuth, as the store keeps
// it.
type installRecord struct {
	Token    string `json:"token"`
	BotUser  string `json:"bot_user_id"`
	AppID    string `json:"app_id,omitempty"`
	TeamName string `json:"team_name,omitempty"`
	// Installed is when the install was stored (Unix seconds).
	Installed int64 `json:"installed"`
}

// workspace is one workspace's credential and bot user.
type workspace struct {
	team, botUser string
	client        *slack.Client
}

// workspaces resolves a workspace to its credential.
type workspaces struct {
	p *Platform

	mu      sync.Mutex
	config  *workspace               // bot_token's (nil without); its team and bot user once auth.test answered, under mu
	local   map[string]installRecord // installs without a store (Deps.Store nil)
	cache   *ttlcache.Cache[string, *workspace]
	missing *ttlcache.Cache[string, struct{}]
}

func newWorkspaces(p *Platform) *workspaces {
	w := &workspaces{
		p:       p,
		local:   map[string]installRecord{},
		cache:   ttlcache.New[string, *workspace](installCacheSize, installCacheTTL, p.clock),
		missing: ttlcache.New[string, struct{}](installCacheSize, missCacheTTL, p.clock),
	}
	if p.cfg.BotToken != "" {
		w.config = &workspace{client: w.newClient(p.cfg.BotToken)}
	}
	return w
}

func (w *workspaces) newClient(token string) *slack.Client {
	return slack.New(token, slack.OptionAPIURL(w.p.cfg.APIURL), slack.OptionHTTPClient(w.p.http))
}

// identify records what auth.test said of bot_token: its workspace and
// bot user.
func (w *workspaces) identify(team, botUser string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.config.team, w.config.botUser = team, botUser
}

// configTeam is bot_token's workspace, "" before auth.test answered.
func (w *workspaces) configTeam() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.config == nil {
		return ""
	}
	return w.config.team
}

// get returns team's workspace. bot_token serves its own workspace, and
// any workspace while auth.test has not said which it is and no install
// claims it; installs are read from the store.
func (w *workspaces) get(ctx context.Context, team string) (*workspace, error) {
	cfg, cfgTeam := w.config, w.configTeam() // config is set once, by newWorkspaces
	if cfg != nil && cfgTeam == team && team != "" {
		return cfg, nil
	}
	if ws, ok := w.cache.Get(team); ok {
		return ws, nil
	}
	if _, ok := w.missing.Get(team); !ok && team != "" && w.p.cfg.ClientID != "" {
		rec, found, err := w.load(ctx, team)
		if err != nil {
			return nil, err
		}
		if found {
			ws := &workspace{team: team, botUser: rec.BotUser, client: w.newClient(rec.Token)}
			w.cache.Add(team, ws)
			return ws, nil
		}
		w.missing.Add(team, struct{}{})
	}
	if cfg != nil && (cfgTeam == "" || w.p.cfg.ClientID == "") {
		return cfg, nil
	}
	return nil, errNotInstalled
}

// client returns team's Web API client, and the workspace whose token it
// holds (bot_token's serves other workspaces too; "" before auth.test
// answered): the workspace whose rate limits the call counts against.
func (w *workspaces) client(ctx context.Context, team string) (*slack.Client, string, error) {
	ws, err := w.get(ctx, team)
	if err != nil {
		return nil, "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return ws.client, ws.team, nil
}

// botUser is the bot user of team's workspace, "" when unknown; err is
// set when the store could not tell (not when team is not installed).
func (w *workspaces) botUser(ctx context.Context, team string) (string, error) {
	ws, err := w.get(ctx, team)
	if err != nil {
		if errors.Is(err, errNotInstalled) {
			err = nil
		}
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return ws.botUser, nil
}

// load reads team's install from the store.
func (w *workspaces) load(ctx context.Context, team string) (installRecord, bool, error) {
	st := w.p.deps.Store
	if st == nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		rec, ok := w.local[team]
		return rec, ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, ok, err := st.Registry().Get(ctx, installsNamespace, team)
	if err != nil || !ok {
		return installRecord{}, false, err
	}
	var rec installRecord
	if err := json.Unmarshal(e.Value, &rec); err != nil || rec.Token == "" {
		return installRecord{}, false, fmt.Errorf("slack: the stored install of %s is unreadable", team)
	}
	return rec, true, nil
}

// install stores team's install, replacing an earlier one.
func (w *workspaces) install(ctx context.Context, team string, rec installRecord) error {
	w.forget(team)
	if st := w.p.deps.Store; st != nil {
		value, _ := json.Marshal(rec) // plain fields: cannot fail
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		if _, err := st.Registry().Put(ctx, installsNamespace, team, value); err != nil {
			return fmt.Errorf("slack: store the install: %w", err)
		}
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.local[team] = rec
	return nil
}

// remove forgets team's install (app_uninstalled, tokens_revoked); it
// reports whether there was one.
func (w *workspaces) remove(ctx context.Context, team string) (bool, error) {
	w.forget(team)
	if st := w.p.deps.Store; st != nil {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		return st.Registry().Delete(ctx, installsNamespace, team)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.local[team]
	delete(w.local, team)
	return ok, nil
}

// forget drops team from the caches, so its install is read again.
func (w *workspaces) forget(team string) {
	w.cache.Remove(team)
	w.missing.Remove(team)
}
