package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/platform"
)

// Command registration. The bot is shared, its commands are not: each
// tenant's latest command_manifest (from any of its gateways; a newer one
// replaces the older whole) is registered as the guild commands of every
// guild that tenant claims in Config.Guilds. A guild belongs to one tenant,
// so tenants never compete for a name or for the 100-command cap: two
// tenants may both define "ask", and each guild shows its owner's.
//
// Global commands exist only for DMs, where no guild scopes them: the
// registry holds DMTenant's manifest, with contexts [BOT_DM] so it never
// shows in a guild beside the guild's own commands. No other tenant's
// manifest ever goes global. Without a DMTenant the registry is kept empty;
// until DMTenant's gateway sends a manifest it is left as it is. Within a
// manifest the first entry of a name wins and entries past 100 are dropped,
// with a log line.
//
// After CommandSyncDebounce without a new manifest, every scope whose
// desired set may have changed (the guilds of the tenants that sent one,
// the global registry) is reconciled: GET, compare, and a bulk PUT
// (PUT /applications/{app}/guilds/{guild}/commands, or .../commands) only
// when it differs. A guild is reconciled only once the Gateway delivered it
// (GUILD_CREATE, which also queues it), so a guild the bot is not in draws
// no 403. A guild's calls count against its tenant's share of the budgets.
// It is best effort: a failure is logged per scope and retried on the next
// manifest or GUILD_CREATE, and never touches a handshake.

// commandName is what the contract lets through; invalid entries are
// dropped one by one.
var commandName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// Discord's limits on chat-input commands, per guild and globally.
const (
	maxCommands           = 100
	maxCommandDescription = 100
)

// serverOnlyKeys are fields Discord adds to a registered command.
var serverOnlyKeys = []string{"id", "application_id", "version", "guild_id"}

// globalOnlyKeys are fields Discord honours on global commands only; they
// are left out of guild commands (Discord would drop them, and the registry
// would never compare equal).
var globalOnlyKeys = []string{"contexts", "integration_types", "dm_permission"}

// Where the global DM commands may be used: contexts [BOT_DM], for the app
// installed to guilds (integration_types [GUILD_INSTALL]).
var (
	dmContexts   = []any{1}
	guildInstall = []any{0}
)

// globalScope names the global registry among the scopes to reconcile;
// every other scope is a guild id.
const globalScope = ""

// commandSync holds the tenants' manifests and reconciles the registries
// they decide (see above) on its loop.
type commandSync struct {
	p     *Platform
	dirty chan struct{}

	mu        sync.Mutex
	manifests map[string][]map[string]any // tenant -> its latest entries
	present   map[string]bool             // guilds the Gateway delivered
	pending   map[string]bool             // scopes to reconcile
}

func newCommandSync(p *Platform) *commandSync {
	return &commandSync{
		p: p, dirty: make(chan struct{}, 1),
		manifests: map[string][]map[string]any{}, present: map[string]bool{}, pending: map[string]bool{},
	}
}

// ObserveHello implements platform.HelloObserver: a discord hello's
// command_manifest is validated and scheduled for reconciliation. It never
// blocks and never fails the handshake.
func (p *Platform) ObserveHello(tenant, gatewayID string, hello *contract.GatewayFrame) {
	if hello == nil || hello.Platform != platformName || len(hello.CommandManifest) == 0 {
		return
	}
	entries, dropped, err := parseManifest(hello.CommandManifest)
	if err != nil {
		p.log.Warn("discord command_manifest ignored", "tenant", tenant, "gateway_id", gatewayID, "err", err)
		return
	}
	if dropped > 0 {
		p.log.Warn("discord command_manifest entries dropped", "tenant", tenant, "gateway_id", gatewayID, "dropped", dropped, "kept", len(entries))
	}
	p.cmds.set(tenant, entries)
}

// parseManifest validates a command_manifest array entry by entry.
func parseManifest(raw json.RawMessage) (entries []map[string]any, dropped int, err error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, 0, errors.New("command_manifest is not an array")
	}
	seen := map[string]bool{}
	for _, item := range list {
		var e map[string]any
		if json.Unmarshal(item, &e) != nil || e == nil {
			dropped++
			continue
		}
		name, _ := e["name"].(string)
		desc, _ := e["description"].(string)
		n := utf8.RuneCountInString(desc)
		if !commandName.MatchString(name) || n == 0 || n > maxCommandDescription || seen[name] || len(entries) == maxCommands {
			dropped++
			continue
		}
		if opts, ok := e["options"]; ok && opts != nil {
			if _, isList := opts.([]any); !isList {
				dropped++
				continue
			}
		}
		for _, k := range serverOnlyKeys {
			delete(e, k)
		}
		seen[name] = true
		entries = append(entries, e)
	}
	return entries, dropped, nil
}

// set records tenant's manifest and queues the scopes it decides: the
// tenant's guilds, and the global registry (DMTenant's manifest, or kept
// empty when there is no DMTenant).
func (c *commandSync) set(tenant string, entries []map[string]any) {
	c.mu.Lock()
	c.manifests[tenant] = entries
	for guild, owner := range c.p.guildOwners() {
		if owner == tenant {
			c.pending[guild] = true
		}
	}
	if dm := c.p.cfg.DMTenant; dm == "" || dm == tenant {
		c.pending[globalScope] = true
	}
	c.mu.Unlock()
	c.signal()
}

// guildDelivered records that the Gateway delivered guild (GUILD_CREATE)
// and queues it when its tenant has sent a manifest.
func (c *commandSync) guildDelivered(guild string) {
	tenant, ok := c.p.guildOwners()[guild]
	if !ok {
		return
	}
	c.mu.Lock()
	c.present[guild] = true
	_, known := c.manifests[tenant]
	if known {
		c.pending[guild] = true
	}
	c.mu.Unlock()
	if known {
		c.signal()
	}
}

// rebound queues guild, whose tenant changed or which is no longer bound,
// when the Gateway has delivered it: its registry now follows the new
// tenant's manifest, or is emptied.
func (c *commandSync) rebound(guild string) {
	c.mu.Lock()
	queue := c.present[guild]
	if queue {
		c.pending[guild] = true
	}
	c.mu.Unlock()
	if queue {
		c.signal()
	}
}

func (c *commandSync) signal() {
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// take returns the queued scopes, sorted, leaving out guilds the Gateway has
// not delivered (GUILD_CREATE queues them again), and empties the queue.
func (c *commandSync) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	scopes := make([]string, 0, len(c.pending))
	for _, scope := range slices.Sorted(maps.Keys(c.pending)) {
		if scope == globalScope || c.present[scope] {
			scopes = append(scopes, scope)
		}
	}
	clear(c.pending)
	return scopes
}

// desired is what scope should hold, and the tenant its calls count
// against: a guild's tenant's manifest without the global-only fields; for
// the global registry DMTenant's, usable in DMs with the bot only.
func (c *commandSync) desired(scope string) (tenant string, want []map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if scope == globalScope {
		tenant = c.p.cfg.DMTenant
	} else {
		tenant = c.p.guildOwners()[scope]
	}
	entries := c.manifests[tenant]
	want = make([]map[string]any, 0, len(entries))
	if scope == globalScope && tenant == "" {
		return tenant, want
	}
	for _, e := range entries {
		cmd := maps.Clone(e)
		for _, k := range globalOnlyKeys {
			delete(cmd, k)
		}
		if scope == globalScope {
			cmd["contexts"] = dmContexts
			cmd["integration_types"] = guildInstall
		}
		want = append(want, cmd)
	}
	return tenant, want
}

// loop reconciles after each debounced burst of manifests until ctx ends.
func (c *commandSync) loop(ctx context.Context) {
	debounce := c.p.cfg.CommandSyncDebounce
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.dirty:
		}
		for quiet := false; !quiet; { // until debounce passes without a signal
			fired := make(chan struct{})
			t := c.p.clock.AfterFunc(debounce, func() { close(fired) })
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-c.dirty:
				t.Stop()
			case <-fired:
				quiet = true
			}
		}
		for _, scope := range c.take() {
			c.reconcileScope(ctx, scope)
		}
	}
}

// reconcileScope reconciles one scope and logs the outcome.
func (c *commandSync) reconcileScope(ctx context.Context, scope string) {
	name := "global"
	if scope != globalScope {
		name = "guild " + scope
	}
	tenant, want := c.desired(scope)
	rctx, cancel := context.WithTimeout(platform.WithTenant(ctx, tenant), c.p.cfg.RequestTimeout)
	defer cancel()
	changed, err := c.reconcile(rctx, scope, want)
	switch {
	case err != nil:
		c.p.log.Warn("discord command registry sync failed", "scope", name, "tenant", tenant, "err", describe(err).Error)
	case changed:
		c.p.log.Info("discord commands updated", "scope", name, "tenant", tenant, "commands", len(want))
	default:
		c.p.log.Debug("discord commands already in sync", "scope", name, "tenant", tenant)
	}
}

// reconcile makes scope's registry equal want: GET, diff, and a bulk PUT
// only if they differ.
func (c *commandSync) reconcile(ctx context.Context, scope string, want []map[string]any) (bool, error) {
	endpoint := discordgo.EndpointApplicationGlobalCommands(c.p.cfg.ApplicationID)
	if scope != globalScope {
		endpoint = discordgo.EndpointApplicationGuildCommands(c.p.cfg.ApplicationID, scope)
	}
	var have []map[string]any
	if err := c.p.rest(ctx, "GET", endpoint, nil, &have); err != nil {
		return false, err
	}
	if sameCommands(want, have) {
		return false, nil
	}
	if err := c.p.rest(ctx, "PUT", endpoint, want, nil); err != nil {
		return false, err
	}
	return true, nil
}

// sameCommands compares the registry with the desired set on the fields the
// manifest sets, ignoring false, null and empty values Discord adds or drops.
func sameCommands(want, have []map[string]any) bool {
	if len(want) != len(have) {
		return false
	}
	byName := make(map[string]map[string]any, len(have))
	for _, h := range have {
		name, _ := h["name"].(string)
		byName[name] = h
	}
	for _, w := range want {
		h, ok := byName[w["name"].(string)]
		if !ok {
			return false
		}
		projected := make(map[string]any, len(w))
		for k := range w {
			projected[k] = h[k]
		}
		if !bytes.Equal(canonicalJSON(w), canonicalJSON(projected)) {
			return false
		}
	}
	return true
}

// canonicalJSON encodes v with sorted keys, leaving out false, null, "" and
// empty arrays and objects.
func canonicalJSON(v any) []byte {
	b, _ := json.Marshal(prune(v))
	return b
}

func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, xv := range x {
			if pv := prune(xv); pv != nil {
				out[k] = pv
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			if pe := prune(e); pe != nil {
				out = append(out, pe)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return slices.Clip(out)
	case bool:
		if !x {
			return nil
		}
	case string:
		if x == "" {
			return nil
		}
	case nil:
		return nil
	}
	return v
}
