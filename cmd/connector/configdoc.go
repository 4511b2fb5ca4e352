package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
)

// configReference renders docs/configuration.md from the Config struct:
// every YAML key (found by reflection, so none can be missed) with its type
// and the doc comment of its Go field (read from the source in srcDirs).
func configReference(srcDirs []string) (string, error) {
	docs, err := fieldDocs(srcDirs)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(configDocHeader)
	rows := 0
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			key := prefix + tag
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			doc := docs[t.PkgPath()+"."+t.Name()+"."+f.Name]
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, typeName(ft), doc)
			rows++
			switch {
			case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
				walk(ft, key+".")
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), key+"[].")
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), key+".<"+mapKeyName(tag)+">.")
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	if rows == 0 {
		return "", fmt.Errorf("configdoc: no keys found")
	}
	b.WriteString(envDocHeader)
	for _, k := range envKeys() {
		fmt.Fprintf(&b, "| `%s` | `%s` |\n", k.Env, k.Key)
	}
	b.WriteString(configDocFooter)
	return b.String(), nil
}

func mapKeyName(tag string) string {
	if tag == "tenants" {
		return "tenant"
	}
	return "name"
}

// typeName is the YAML-facing name of a Go type.
func typeName(t reflect.Type) string {
	switch {
	case t.PkgPath() == "time" && t.Name() == "Duration":
		return "duration (`30s`, `5m`)"
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Struct:
		return "object"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Key()) + " to " + typeName(t.Elem())
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	}
	return t.String()
}

// fieldDocs maps "<import path>.<Type>.<Field>" to the field's doc comment,
// flattened to one line, for every struct type declared in dirs (paths
// relative to the module root, e.g. "platform/discord").
func fieldDocs(dirs []string) (map[string]string, error) {
	out := make(map[string]string)
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(moduleRoot, dir, "*.go"))
		if err != nil {
			return nil, err
		}
		importPath := "connector/" + dir
		if dir == "cmd/connector" {
			importPath = reflect.TypeFor[Config]().PkgPath() // "main"
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return false
				}
				for _, fl := range st.Fields.List {
					if fl.Doc == nil {
						continue
					}
					text := strings.Join(strings.Fields(fl.Doc.Text()), " ")
					text = strings.ReplaceAll(text, "|", `\|`)
					for _, name := range fl.Names {
						out[importPath+"."+ts.Name.Name+"."+name.Name] = text
					}
				}
				return false
			})
		}
	}
	return out, nil
}

// moduleRoot is where configReference finds the sources, relative to the
// package directory tests run in.
var moduleRoot = "../.."

// configDocDirs are the packages whose config structs the reference covers.
var configDocDirs = []string{"cmd/connector", "platform/discord", "platform/telegram", "platform/nexscope"}

const configDocHeader = `# Configuration reference

<!-- Generated from the Config struct by ` + "`go test ./cmd/connector -run TestConfigurationDoc -update`" + `.
     TestConfigurationDoc fails when this file and the code disagree: edit the Go doc comments, not this file. -->

The connector reads one YAML file: ` + "`-config FILE`" + `, else ` + "`$CONNECTOR_CONFIG`" + `, else the first of
` + "`./connector.yaml`" + ` and ` + "`/etc/connector/connector.yaml`" + ` that exists; with none it runs on embedded
defaults (see the README), and the log says which it did. Unknown keys and invalid values are
errors that name the key; ` + "`connector serve -config FILE -check`" + ` validates a file and exits, and
` + "`connector config example`" + ` prints a commented example. Every key is optional unless its
description says otherwise; a missing key takes the default its description names. Every
single-value key outside the platform sections can also be set from the environment (the table
after the keys).

Environment variables (a set variable overrides the file):

| variable | effect |
|---|---|
| ` + "`CONNECTOR_CONFIG`" + ` | the config file, when ` + "`-config`" + ` is not given |
| ` + "`CONNECTOR_<KEY>`" + ` | a config key (the table after the keys) |
| ` + "`CONNECTOR_GATEWAY_SECRETS_<ID>`" + ` | extra secrets (comma-separated) of gateway ` + "`<ID>`" + ` (upper-cased, other characters as ` + "`_`" + `) |
| ` + "`CONNECTOR_DATA_DIR`" + ` | the data directory (` + "`store.path`" + `); the ` + "`-data-dir`" + ` flag overrides both |
| ` + "`CONNECTOR_REDIS_URL`" + ` | ` + "`store.redis_url`" + ` |
| ` + "`CONNECTOR_INSTANCE`" + ` | ` + "`store.instance`" + ` |
| ` + "`DISCORD_BOT_TOKEN`" + `, ` + "`DISCORD_PUBLIC_KEY`" + `, ` + "`DISCORD_APPLICATION_ID`" + ` | Discord credentials; the token alone enables the platform |
| ` + "`TELEGRAM_BOT_TOKEN`" + `, ` + "`TELEGRAM_WEBHOOK_SECRET`" + `, ` + "`TELEGRAM_WEBHOOK_URL`" + ` | Telegram credentials; the token alone enables the platform (long polling) |
| ` + "`NEXSCOPE_TOKEN`" + `, ` + "`NEXSCOPE_MAX_USERS`" + `, ` + "`NEXSCOPE_MAX_PAYLOAD`" + `, ` + "`NEXSCOPE_MAX_FILE`" + ` | nexscope shared token (enables the platform) and limits |

| key | type | description |
|---|---|---|
`

// envDocHeader introduces the generated table of key variables.
const envDocHeader = `
## Environment variables for keys

Each key below can be set from its variable, written as in the file (` + "`30s`, `true`, `8388608`" + `);
a set variable overrides the file, and ` + "`-listen`" + ` overrides both. The platform sections,
` + "`tenants`" + ` and lists are set in the file, and the platform credentials from the variables
above.

| variable | key |
|---|---|
`

const configDocFooter = `
## Example

` + "```yaml" + `
` + exampleConfig + "```" + `
`

// exampleConfig is the commented example of docs/configuration.md and
// connector config example.
const exampleConfig = `# connector.yaml: every key is in docs/configuration.md.
listen: 0.0.0.0:8080            # public: /relay, the webhooks, nexscope, /healthz
ops: {listen: 127.0.0.1:9090}   # private: /metrics, /readyz, /platforms
shutdown_grace: 30s
log: {level: info, format: json}
http: {body_timeout: 10s, idle_timeout: 60s}   # limits before a client authenticates
# Secrets may stay out of this file: CONNECTOR_GATEWAY_SECRETS_ACME_GW1=..., DISCORD_BOT_TOKEN=...
tenants:
  - id: acme
    gateways:
      - id: acme-gw1
        secrets: ["change-me-long-random", "previous-secret-during-rotation"]
    session: {group_sessions_per_user: true}
  - id: globex
    gateways:
      - id: globex-gw
        secrets: ["another-long-random-secret"]
    session: {nexscope_key_platform: nexscope}   # its gateways have a nexscope platform plugin
discord:
  application_id: "1310000000000000000"
  public_key: "<64 hex digits from the developer portal>"
  # bot_token from DISCORD_BOT_TOKEN
  guilds: {"1310000000000000500": acme, "1310000000000000600": globex}
  dm_tenant: acme
telegram:
  # token from TELEGRAM_BOT_TOKEN; long polling without webhook_url
  chats: {"-1001234567890": acme, "-1009876543210": globex}
nexscope:
  # token from NEXSCOPE_TOKEN
  rooms:
    - {name: default, tenant: acme}
    - {name: globex-room, tenant: globex}
`
