package nexscope

import (
	"strings"
	"testing"

	"connector/internal/clock"
	"connector/platform"
	"connector/store"
)

func TestConfigValidateNamesTheKey(t *testing.T) {
	ok := Config{Token: "t"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	if err := (&Config{Token: "t", HopLimit: -1}).Validate(); err != nil {
		t.Fatalf("hop_limit -1 (no limit): %v", err)
	}
	for key, cfg := range map[string]Config{
		"token":                            {},
		"max_users":                        {Token: "t", MaxUsers: -1},
		"max_payload":                      {Token: "t", MaxPayload: 100},
		"max_file":                         {Token: "t", MaxFile: -5},
		"max_payload must be at most":      {Token: "t", MaxPayload: 1<<63 - 1},
		"send_queue_bytes must be at most": {Token: "t", SendQueueBytes: 1<<30 + 1},
		"transfer_timeout":                 {Token: "t", TransferTimeout: -1},
		"heartbeat_interval":               {Token: "t", HeartbeatInterval: -1},
		"write_timeout":                    {Token: "t", WriteTimeout: -1},
		"send_queue_bytes":                 {Token: "t", SendQueueBytes: -1},
		"max_text":                         {Token: "t", MaxText: 3},
		"remember_messages":                {Token: "t", RememberMessages: -1},
		"bot_name":                         {Token: "t", BotName: "no spaces"},
		"rooms[1].name":                    {Token: "t", Rooms: []Room{{Name: "a"}, {Name: "a/b"}}},
		"configured twice":                 {Token: "t", Rooms: []Room{{Name: "a"}, {Name: "a"}}},
		"rooms[0].bot_name":                {Token: "t", Rooms: []Room{{Name: "a", Tenant: "t1", BotName: "b c"}}},
		"rooms[0].max_users":               {Token: "t", Rooms: []Room{{Name: "a", Tenant: "t1", MaxUsers: 1}}},
		"has no tenant":                    {Token: "t", Rooms: []Room{{Name: "a", BotName: "bot"}}},
	} {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: Validate() = %v", key, err)
		}
		if _, err := New(cfg, platform.Deps{}); err == nil {
			t.Errorf("%s: New accepted an invalid config", key)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	p, err := New(Config{Token: "t"}, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.cfg
	if c.MaxUsers != 50 || c.MaxPayload != 10<<20 || c.MaxFile != 100<<20 || c.TransferTimeout != DefaultTransferTimeout ||
		c.HeartbeatInterval != DefaultHeartbeatInterval || c.HopLimit != 3 || c.BotName != "hermes" || c.MaxText != 4096 {
		t.Fatalf("defaults %+v", c)
	}
	if c.ClaimTimeout <= store.DefaultRedisReplicaTimeout {
		t.Fatalf("claim_timeout %v does not outlast the store's replica wait %v", c.ClaimTimeout, store.DefaultRedisReplicaTimeout)
	}
	if p.rooms[DefaultRoom] == nil || p.rooms[DefaultRoom].tenant() != "" {
		t.Fatal("no unbound default room")
	}
	if p.deps.Clock != clock.System {
		t.Fatal("no real clock by default")
	}
}
