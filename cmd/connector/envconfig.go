package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envKeyPrefix starts the environment variable of every config key.
const envKeyPrefix = "CONNECTOR_"

// envConfigPath names the config file when -config is not given.
const envConfigPath = "CONNECTOR_CONFIG"

// defaultConfigSearch is where serve looks for a config file when neither
// -config nor $CONNECTOR_CONFIG names one; with none of them there, it runs
// on embedded defaults.
var defaultConfigSearch = []string{"connector.yaml", "/etc/connector/connector.yaml"}

// envKey is one config key that an environment variable can set.
type envKey struct {
	Env   string // CONNECTOR_RELAY_ACK_WINDOW
	Key   string // relay.ack_window
	index []int  // the field's index path in Config
	typ   reflect.Type
	// own is set when the key's variable is read by the code that owns
	// the key (keyVariables), not by applyKeyEnv.
	own bool
}

// keyVariables are keys whose variable had its own name before every key
// had one; the code that owns the key reads it.
var keyVariables = map[string]string{
	"store.path":      envDataDir,
	"store.redis_url": EnvRedisURL,
}

// envKeys lists every config key an environment variable can set: each
// single value outside the platform sections (which have their own
// variables, such as DISCORD_BOT_TOKEN) and outside lists and maps. The
// variable is CONNECTOR_ and the key upper-cased, dots as underscores.
func envKeys() []envKey {
	var keys []envKey
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			key := prefix + tag
			idx := append(append([]int(nil), index...), i)
			switch ft := f.Type; {
			case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
				walk(ft, key+".", idx)
			case ft.Kind() == reflect.Pointer, ft.Kind() == reflect.Slice, ft.Kind() == reflect.Map:
				// Platform sections, tenants, lists: the file's job.
			default:
				env, own := keyVariables[key]
				if !own {
					env = envKeyPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
				}
				keys = append(keys, envKey{Env: env, Key: key, index: idx, typ: ft, own: own})
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return keys
}

// applyKeyEnv sets every key whose variable is set, reading the value as
// YAML reads it in the file (30s, true, 8388608).
func (c *Config) applyKeyEnv(lookup func(string) (string, bool)) error {
	v := reflect.ValueOf(c).Elem()
	for _, k := range envKeys() {
		raw, ok := lookup(k.Env)
		if !ok || k.own {
			continue
		}
		dst := reflect.New(k.typ)
		if err := yaml.Unmarshal([]byte(raw), dst.Interface()); err != nil {
			hint := strings.TrimPrefix(err.Error(), "yaml: ")
			var te *yaml.TypeError
			if errors.As(err, &te) && len(te.Errors) > 0 {
				if m := typeErrorLine.FindStringSubmatch(te.Errors[0]); m != nil {
					hint = typeHint(m[2], m[3], m[4])
				}
			}
			return fmt.Errorf("config: %s (for %s): %s", k.Env, k.Key, hint)
		}
		v.FieldByIndex(k.index).Set(dst.Elem())
	}
	return nil
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
