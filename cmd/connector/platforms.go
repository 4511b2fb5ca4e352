package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"connector/platform"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/platform/whatsapp"
)

func init() {
	eventNormalizers["discord"] = discord.NormalizeFixture
	eventNormalizers["telegram"] = telegram.NormalizeFixture
	eventOutcomes["slack"] = slack.NormalizeFixture
	eventOutcomes["whatsapp_cloud"] = whatsapp.NormalizeFixture
}

// embeddedNexscope is the nexscope section of the embedded defaults: the
// generated token, and the default room bound to the one tenant.
func embeddedNexscope(gen *generatedSecrets, tenant string) *nexscope.Config {
	return &nexscope.Config{
		Token: gen.NexscopeToken,
		Rooms: []nexscope.Room{{Name: nexscope.DefaultRoom, Tenant: tenant}},
	}
}

// normalizePlatforms rewrites the guild and chat ids of the platform
// sections to the numbers they spell; one id under two spellings is an
// error.
func (c *Config) normalizePlatforms() error {
	var err error
	if d := c.Discord; d != nil {
		d.Guilds, err = canonicalIDs("discord.guilds", d.Guilds, func(id string) (string, bool) {
			n, err := strconv.ParseUint(id, 10, 64)
			return strconv.FormatUint(n, 10), err == nil
		})
		if err != nil {
			return err
		}
	}
	if t := c.Telegram; t != nil {
		t.Chats, err = canonicalIDs("telegram.chats", t.Chats, func(id string) (string, bool) {
			n, err := strconv.ParseInt(id, 10, 64)
			return strconv.FormatInt(n, 10), err == nil
		})
	}
	return err
}

// validatePlatforms checks each enabled platform's section and that every
// tenant it routes to is configured.
func (c *Config) validatePlatforms() error {
	tenants := c.TenantIDs()
	known := func(key, tenant string) error {
		if tenant != "" && !tenants[tenant] {
			return fmt.Errorf("config: %s: tenant %q is not defined in tenants", key, tenant)
		}
		return nil
	}
	if d := c.Discord; d != nil {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		for _, g := range slices.Sorted(maps.Keys(d.Guilds)) {
			if err := known(fmt.Sprintf("discord.guilds[%q]", g), d.Guilds[g]); err != nil {
				return err
			}
		}
		if err := known("discord.dm_tenant", d.DMTenant); err != nil {
			return err
		}
		for _, t := range slices.Sorted(maps.Keys(d.Tenants)) {
			if err := known(fmt.Sprintf("discord.tenants[%q]", t), t); err != nil {
				return err
			}
		}
	}
	if t := c.Telegram; t != nil {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		for _, chat := range slices.Sorted(maps.Keys(t.Chats)) {
			if err := known(fmt.Sprintf("telegram.chats[%q]", chat), t.Chats[chat]); err != nil {
				return err
			}
		}
		for _, tenant := range slices.Sorted(maps.Keys(t.Tenants)) {
			if err := known(fmt.Sprintf("telegram.tenants[%q]", tenant), tenant); err != nil {
				return err
			}
		}
	}
	if s := c.Slack; s != nil {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		for _, team := range slices.Sorted(maps.Keys(s.Teams)) {
			if err := known(fmt.Sprintf("slack.teams[%q]", team), s.Teams[team]); err != nil {
				return err
			}
		}
		for _, tenant := range slices.Sorted(maps.Keys(s.Tenants)) {
			if err := known(fmt.Sprintf("slack.tenants[%q]", tenant), tenant); err != nil {
				return err
			}
		}
	}
	if w := c.WhatsApp; w != nil {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		for _, number := range slices.Sorted(maps.Keys(w.PhoneNumbers)) {
			if err := known(fmt.Sprintf("whatsapp.phone_numbers[%q]", number), w.PhoneNumbers[number]); err != nil {
				return err
			}
		}
		for _, tenant := range slices.Sorted(maps.Keys(w.Tenants)) {
			if err := known(fmt.Sprintf("whatsapp.tenants[%q]", tenant), tenant); err != nil {
				return err
			}
		}
	}
	if n := c.Nexscope; n != nil {
		if err := n.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		for i, r := range n.Rooms {
			if err := known(fmt.Sprintf("nexscope.rooms[%d].tenant", i), r.Tenant); err != nil {
				return err
			}
		}
	}
	return nil
}

// canonicalIDs rewrites the keys of ids (platform ids mapped to tenants) to
// the spelling canonical returns, so "0500" routes id 500 as the platform
// sends it; a key canonical cannot read is kept for the platform's own
// validation to name. Two keys spelling one id are an error.
func canonicalIDs(key string, ids map[string]string, canonical func(string) (string, bool)) (map[string]string, error) {
	if ids == nil {
		return nil, nil
	}
	out := make(map[string]string, len(ids))
	spelled := make(map[string]string, len(ids)) // canonical -> the key that spelled it
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		c, ok := canonical(id)
		if !ok {
			c = id
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
	if cfg.Discord != nil {
		p, err := discord.New(*cfg.Discord, deps)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
	}
	if cfg.Telegram != nil {
		p, err := telegram.New(*cfg.Telegram, deps)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
	}
	if cfg.Slack != nil {
		p, err := slack.New(*cfg.Slack, deps)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
	}
	if cfg.WhatsApp != nil {
		p, err := whatsapp.New(*cfg.WhatsApp, deps)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
	}
	if cfg.Nexscope != nil {
		p, err := nexscope.New(*cfg.Nexscope, deps)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}
