package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
)

// Global command registry reconciliation. The bot is shared, so its global
// application commands are too: the desired set is the union of the latest
// command_manifest of every tenant (a name two tenants define differently
// takes the definition of the tenant whose id sorts first). After
// CommandSyncDebounce without a new manifest, the connector GETs the
// registry, compares, and PUTs the whole set only when it differs. It is
// best effort: a failure is logged and retried on the next manifest, and
// never touches a handshake.

// commandName is what the contract lets through; invalid entries are
// dropped one by one.
var commandName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// Discord's limits on global chat-input commands.
const (
	maxCommands           = 100
	maxCommandDescription = 100
)

// serverOnlyKeys are fields Discord adds to a registered command.
var serverOnlyKeys = []string{"id", "application_id", "version", "guild_id"}

type commandSync struct {
	p     *Platform
	dirty chan struct{}

	mu        sync.Mutex
	manifests map[string][]map[string]any
}

func newCommandSync(p *Platform) *commandSync {
	return &commandSync{p: p, dirty: make(chan struct{}, 1), manifests: map[string][]map[string]any{}}
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

func (c *commandSync) set(tenant string, entries []map[string]any) {
	c.mu.Lock()
	c.manifests[tenant] = entries
	c.mu.Unlock()
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// desired is the union of the tenants' manifests, sorted by name.
func (c *commandSync) desired() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	tenants := sortedKeys(c.manifests)
	byName := map[string]map[string]any{}
	for _, t := range tenants {
		for _, e := range c.manifests[t] {
			name := e["name"].(string)
			if _, ok := byName[name]; !ok && len(byName) < maxCommands {
				byName[name] = e
			}
		}
	}
	out := make([]map[string]any, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, byName[name])
	}
	return out
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
		t := time.NewTimer(debounce)
		for quiet := false; !quiet; {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-c.dirty:
				t.Reset(debounce)
			case <-t.C:
				quiet = true
			}
		}
		rctx, cancel := context.WithTimeout(ctx, c.p.cfg.RequestTimeout)
		changed, err := c.reconcile(rctx)
		cancel()
		switch {
		case err != nil:
			c.p.log.Warn("discord command registry sync failed", "err", describe(err).msg)
		case changed:
			c.p.log.Info("discord global commands updated")
		default:
			c.p.log.Debug("discord global commands already in sync")
		}
	}
}

// reconcile makes the global registry equal the desired set: GET, diff, and
// a bulk PUT only if they differ.
func (c *commandSync) reconcile(ctx context.Context) (bool, error) {
	want := c.desired()
	endpoint := discordgo.EndpointApplicationGlobalCommands(c.p.cfg.ApplicationID)
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
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if pv := prune(x[k]); pv != nil {
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
