package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"connector/platform"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/platform/whatsapp"
	"connector/registry"
	"connector/store"
)

func init() {
	eventOutcomes["discord"] = discord.NormalizeFixture
	eventOutcomes["telegram"] = telegram.NormalizeFixture
	eventOutcomes["slack"] = slack.NormalizeFixture
	eventOutcomes["whatsapp_cloud"] = whatsapp.NormalizeFixture
}

// normalizePlatforms rewrites the guild and chat ids of the platform
// sections to the numbers they spell; one id under two spellings is an
// error.
func (c *Config) normalizePlatforms() error {
	var err error
	if d := c.Discord; d != nil {
		if d.Guilds, err = canonicalIDs("discord.guilds", "discord", platform.BindGuild, d.Guilds); err != nil {
			return err
		}
	}
	if t := c.Telegram; t != nil {
		t.Chats, err = canonicalIDs("telegram.chats", "telegram", platform.BindChat, t.Chats)
	}
	return err
}

// validatePlatforms checks each enabled platform's section and that every
// tenant it routes to is configured. Each check is pure, so a section's
// are made together and the first failing one, in order, is reported.
func (c *Config) validatePlatforms() error {
	tenants := c.TenantIDs()
	known := func(key, tenant string) error {
		if tenant != "" && !tenants[tenant] {
			return fmt.Errorf("config: %s: tenant %q is not defined in tenants", key, tenant)
		}
		return nil
	}
	routed := func(key string, ids map[string]string) error { // id -> tenant
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			if err := known(fmt.Sprintf("%s[%q]", key, id), ids[id]); err != nil {
				return err
			}
		}
		return nil
	}
	keyed := func(key string, tenants []string) error { // the keys of a map by tenant
		for _, t := range tenants {
			if err := known(fmt.Sprintf("%s[%q]", key, t), t); err != nil {
				return err
			}
		}
		return nil
	}
	var errs []error
	if d := c.Discord; d != nil {
		errs = append(errs, valid(d), routed("discord.guilds", d.Guilds), known("discord.dm_tenant", d.DMTenant),
			keyed("discord.tenants", slices.Sorted(maps.Keys(d.Tenants))))
	}
	if t := c.Telegram; t != nil {
		errs = append(errs, valid(t), routed("telegram.chats", t.Chats), keyed("telegram.tenants", slices.Sorted(maps.Keys(t.Tenants))))
		if t.WebhookURL != "" {
			errs = append(errs, strongSecret("telegram.webhook_secret", t.WebhookSecret))
		}
	}
	if s := c.Slack; s != nil {
		errs = append(errs, valid(s), routed("slack.teams", s.Teams), keyed("slack.tenants", slices.Sorted(maps.Keys(s.Tenants))))
	}
	if w := c.WhatsApp; w != nil {
		errs = append(errs, valid(w), routed("whatsapp.phone_numbers", w.PhoneNumbers),
			keyed("whatsapp.tenants", slices.Sorted(maps.Keys(w.Tenants))))
	}
	if n := c.Nexscope; n != nil {
		errs = append(errs, valid(n), strongSecret("nexscope.token", n.Token))
		for i, r := range n.Rooms {
			errs = append(errs, known(fmt.Sprintf("nexscope.rooms[%d].tenant", i), r.Tenant))
		}
	}
	return cmp.Or(errs...)
}

// valid is a section's own check (Validate), its error prefixed "config: ".
func valid(v interface{ Validate() error }) error {
	if err := v.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// canonicalIDs rewrites the keys of ids (platform ids mapped to tenants,
// as bindings of kind on platformName) to the spelling
// registry.CanonicalBinding gives them, so "0500" routes id 500 as the
// platform sends it; a key it refuses is kept for the platform's own
// validation to name. Two keys spelling one id are an error.
func canonicalIDs(key, platformName, kind string, ids map[string]string) (map[string]string, error) {
	if ids == nil {
		return nil, nil
	}
	out := make(map[string]string, len(ids))
	spelled := make(map[string]string, len(ids)) // canonical -> the key that spelled it
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		c := id
		if b, err := registry.CanonicalBinding(registry.Binding{Platform: platformName, Kind: kind, ID: id}); err == nil {
			c = b.ID
		}
		if first, dup := spelled[c]; dup {
			return nil, fmt.Errorf("config: %s: %q and %q are the same id %s; keep one", key, first, id, c)
		}
		spelled[c] = id
		out[c] = ids[id]
	}
	return out, nil
}

// platformNames lists the platforms' names in their order.
func platformNames(platforms []platform.Platform) []string {
	names := make([]string, len(platforms))
	for i, p := range platforms {
		names[i] = p.Name()
	}
	return names
}

// buildPlatforms constructs every enabled platform, in the order descriptors
// merge and untagged outbound on a "relay" connection is resolved.
func buildPlatforms(cfg *Config, deps platform.Deps) ([]platform.Platform, error) {
	var out []platform.Platform
	add := func(p platform.Platform, err error) error {
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
		return nil
	}
	var err error
	if cfg.Discord != nil {
		err = add(discord.New(*cfg.Discord, deps))
	}
	if cfg.Telegram != nil && err == nil {
		err = add(telegram.New(*cfg.Telegram, deps))
	}
	if cfg.Slack != nil && err == nil {
		err = add(slack.New(*cfg.Slack, deps))
	}
	if cfg.WhatsApp != nil && err == nil {
		err = add(whatsapp.New(*cfg.WhatsApp, deps))
	}
	if cfg.Nexscope != nil && err == nil {
		n := *cfg.Nexscope
		n.ClaimTimeout = cmp.Or(cfg.Store.RedisReplicaTimeout, store.DefaultRedisReplicaTimeout) + time.Second
		err = add(nexscope.New(n, deps))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
