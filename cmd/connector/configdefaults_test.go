package main

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/idtoken"
	"connector/internal/cluster"
	"connector/internal/doctabletest"
	"connector/media"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/registry"
	"connector/relay"
	"connector/store"
)

// TestConfigurationDocDefaults: every number, duration and string default
// the code fills into a section docs/configuration.md describes is the one
// its row states, in any of the doc's spellings (30s, 30 s, 1,024, 64 KiB,
// 8388608), so a changed constant cannot leave the reference behind.
func TestConfigurationDocDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(string(doc), "\n") {
		if key, rest, ok := strings.Cut(strings.TrimPrefix(l, "| `"), "` |"); ok && strings.HasPrefix(l, "| `") {
			rows[key] = rest
		}
	}
	c := Config{HTTP: HTTPConfig{MaxUnauthenticatedConns: maxUnauthConnsFor(0)}}
	c.normalizeHTTP()
	checked := 0
	for prefix, cfg := range map[string]any{
		"http": c.HTTP, "relay": relay.Config{}.WithDefaults(), "media": media.Config{}.WithDefaults(),
		"discord": discord.Config{}.WithDefaults(), "telegram": telegram.Config{}.WithDefaults(),
		"slack": slack.Config{}.WithDefaults(), "nexscope": nexscope.Config{}.WithDefaults(),
	} {
		v := reflect.ValueOf(cfg)
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			row, ok := rows[prefix+"."+name]
			if !ok || name == "" || name == "-" {
				continue
			}
			spellings := defaultSpellings(name, v.Field(i).Interface())
			if spellings == nil {
				continue
			}
			checked++
			if !stated(row, spellings) {
				t.Errorf("docs/configuration.md: %s.%s defaults to %s in the code; its row says %q", prefix, name, spellings[0], row)
			}
		}
	}
	for key, v := range map[string]any{ // the defaults of keys outside those sections' structs
		"listen": defaultListen, "ops.listen": defaultOpsListen, "shutdown_grace": defaultShutdownGrace,
		"store.lease_ttl": cluster.DefaultLeaseTTL, "store.redis_replica_timeout": store.DefaultRedisReplicaTimeout,
		"enroll.tenant_claim": idtoken.DefaultTenantClaim, "enroll.max_token_lifetime": idtoken.DefaultMaxLifetime,
		"tenants[].max_gateways": registry.DefaultMaxGateways,
	} {
		checked++
		if spellings := defaultSpellings(key, v); !stated(rows[key], spellings) {
			t.Errorf("docs/configuration.md: %s defaults to %s in the code; its row says %q", key, spellings[0], rows[key])
		}
	}
	if checked < 68 {
		t.Errorf("%d defaults checked, want at least 68", checked)
	}
}

// defaultSpellings returns the ways docs/configuration.md may write v, the
// default of key; nil for a value it does not check (zero, a bool, a list).
func defaultSpellings(key string, v any) []string {
	switch x := v.(type) {
	case time.Duration:
		if x <= 0 {
			return nil
		}
		s := x.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return []string{s, doctabletest.FormatDefault(key, x), fmt.Sprintf("%gs", x.Seconds())}
	case int, int64, float64:
		n, _ := strconv.ParseFloat(fmt.Sprint(x), 64)
		if n <= 0 {
			return nil
		}
		return []string{fmt.Sprint(x), doctabletest.FormatDefault(key, x), strings.ReplaceAll(doctabletest.FormatDefault(key, x), " ", "")}
	case string:
		if x == "" {
			return nil
		}
		return []string{strings.TrimSuffix(x, "/")}
	}
	return nil
}

// stated reports whether row states one of spellings after "Default" or
// "Zero means", as a whole value.
func stated(row string, spellings []string) bool {
	for _, lead := range []string{"Default", "Zero means"} {
		for _, part := range strings.Split(row, lead)[1:] {
			for _, s := range spellings {
				if j := strings.Index(part, s); j >= 0 && j < 40 && (j+len(s) == len(part) || !isDigit(part[j+len(s)])) {
					return true
				}
			}
		}
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
