package main

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
)

// envKeyPrefix starts the environment variable of every config key.
const envKeyPrefix = "CONNECTOR_"

// envConfigPath names the config file when -config is not given.
const envConfigPath = "CONNECTOR_CONFIG"

// defaultConfigSearch is where serve looks for a config file when neither
// -config nor $CONNECTOR_CONFIG names one; with none of them there, it runs
// on embedded defaults.
var defaultConfigSearch = []string{"connector.yaml", "/etc/connector/connector.yaml"}

// envNames are the keys whose variable is not CONNECTOR_<KEY>: the name
// each had before every key had a variable.
var envNames = map[string]string{
	"store.path":      envDataDir, // read by dataDir, after -data-dir
	"store.redis_url": EnvRedisURL,
	"store.instance":  "CONNECTOR_INSTANCE",
}

// envAliases are variables a key is also read from when its own is unset:
// the platform credentials under the names the Hermes gateway's own
// adapters read them from.
var envAliases = map[string]string{
	"discord.bot_token":       "DISCORD_BOT_TOKEN",
	"discord.public_key":      "DISCORD_PUBLIC_KEY",
	"discord.application_id":  "DISCORD_APPLICATION_ID",
	"telegram.bot_token":      "TELEGRAM_BOT_TOKEN",
	"telegram.webhook_secret": "TELEGRAM_WEBHOOK_SECRET",
	"telegram.webhook_url":    "TELEGRAM_WEBHOOK_URL",
	"slack.signing_secret":    "SLACK_SIGNING_SECRET",
	"slack.bot_token":         "SLACK_BOT_TOKEN",
	"slack.app_token":         "SLACK_APP_TOKEN",
	"slack.client_id":         "SLACK_CLIENT_ID",
	"slack.client_secret":     "SLACK_CLIENT_SECRET",
	"slack.allow_all_users":   "SLACK_ALLOW_ALL_USERS",
	"whatsapp.app_secret":     "WHATSAPP_APP_SECRET",
	"whatsapp.verify_token":   "WHATSAPP_VERIFY_TOKEN",
	"whatsapp.access_token":   "WHATSAPP_ACCESS_TOKEN",
	"nexscope.token":          "NEXSCOPE_TOKEN",
	"nexscope.max_users":      "NEXSCOPE_MAX_USERS",
	"nexscope.max_payload":    "NEXSCOPE_MAX_PAYLOAD",
	"nexscope.max_file":       "NEXSCOPE_MAX_FILE",
}

// envVariable is the variable of key: CONNECTOR_ and the key upper-cased,
// dots as underscores, unless envNames names another.
func envVariable(key string) string {
	if name, ok := envNames[key]; ok {
		return name
	}
	return envKeyPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// lookupKey returns the value of k's variable, else of its alias; an empty
// value counts as unset.
func lookupKey(k configKey, lookup func(string) (string, bool)) (name, value string, ok bool) {
	for _, name := range []string{k.Env, envAliases[k.Key]} {
		if name == "" {
			continue
		}
		if v, set := lookup(name); set && v != "" {
			return name, v, true
		}
	}
	return "", "", false
}

// applyKeyEnv sets every key whose variable is set. A string is taken as
// written; any other value is read as YAML reads it in the file (30s,
// true, 8388608), a list or map whole, in YAML flow or JSON form
// ([{id: acme}], {"-100123": acme}). A variable of a key in a platform
// section enables the platform, as the section does in the file.
// store.path's variable is read by dataDir.
func (c *Config) applyKeyEnv(lookup func(string) (string, bool)) error {
	root := reflect.ValueOf(c).Elem()
	for _, k := range configKeys() {
		if k.Env == "" || k.Env == envDataDir {
			continue
		}
		name, raw, ok := lookupKey(k, lookup)
		if !ok {
			continue
		}
		dst := reflect.New(k.typ())
		if dst.Elem().Kind() == reflect.String {
			dst.Elem().SetString(raw)
		} else if err := decodeValue([]byte(raw), dst.Interface(), k.Key, false); err != nil {
			return fmt.Errorf("config: %s: %w", name, err)
		}
		fieldAt(root, k.index).Set(dst.Elem())
		if c.fromEnv == nil {
			c.fromEnv = map[string]string{}
		}
		c.fromEnv[k.Key] = name
	}
	return nil
}

// fieldAt is the field of v at index, allocating the nil pointers (platform
// sections) on the way.
func fieldAt(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// configPath is the config file serve reads: flag, then $CONNECTOR_CONFIG,
// then the first of search that exists; "" for embedded defaults.
func configPath(flagPath string, search []string, lookup func(string) (string, bool)) string {
	if flagPath != "" {
		return flagPath
	}
	if p, ok := lookup(envConfigPath); ok && p != "" {
		return p
	}
	for _, p := range search {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// strayEnv is a CONNECTOR_* variable of the environment the connector does
// not read, and the one it reads whose name is closest ("" when none is
// close).
type strayEnv struct{ Name, Closest string }

// strayEnvVars returns the CONNECTOR_* variables of environ (os.Environ's
// form) that no key, command or gateway reads, so that serve can warn: a
// misspelled variable is otherwise silently ignored, while a misspelled
// key in the file is an error.
func strayEnvVars(environ []string) []strayEnv {
	known := []string{envConfigPath, envDataDir, envTokenSecret, envAdminURL, envAdminToken}
	for _, k := range configKeys() {
		if k.Env != "" {
			known = append(known, k.Env)
		}
	}
	var stray []strayEnv
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envKeyPrefix) || slices.Contains(known, name) ||
			strings.HasPrefix(name, gatewaySecretsEnvPrefix) {
			continue
		}
		s := strayEnv{Name: name}
		best := len(name)/4 + 1 // closer than this, or no suggestion
		for _, k := range known {
			if d := editDistance(name, k); d < best {
				s.Closest, best = k, d
			}
		}
		stray = append(stray, s)
	}
	return stray
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// warnStrayEnv logs a warning for each variable strayEnvVars finds.
func warnStrayEnv(log *slog.Logger, environ []string) {
	for _, s := range strayEnvVars(environ) {
		if s.Closest != "" {
			log.Warn("environment variable not read by the connector; misspelled?", "variable", s.Name, "did_you_mean", s.Closest)
			continue
		}
		log.Warn("environment variable not read by the connector; misspelled?", "variable", s.Name)
	}
}
