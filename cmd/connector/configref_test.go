package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
)

// configReference renders docs/configuration.md from the Config struct:
// every YAML key (configKeys, so none can be missed) with its type and the
// doc comment of its Go field (read from the source in srcDirs, worded for
// operators by operatorText), then every key's environment variable.
func configReference(srcDirs []string) (string, error) {
	docs, err := fieldDocs(srcDirs)
	if err != nil {
		return "", err
	}
	keys := configKeys()
	if len(keys) == 0 {
		return "", fmt.Errorf("configdoc: no keys found")
	}
	names := make(map[string]string, len(keys)) // Go field name -> YAML key, sections aside
	for _, k := range keys {
		if !k.isSection() {
			names[k.field.Name], _, _ = strings.Cut(k.field.Tag.Get("yaml"), ",")
		}
	}
	declaredBy := owners(keys)
	var b strings.Builder
	b.WriteString(configDocHeader)
	for i, k := range keys {
		owner := declaredBy[i]
		if owner == nil {
			return "", fmt.Errorf("configdoc: no struct declares %s", k.Key)
		}
		doc := docs[owner.PkgPath()+"."+owner.Name()+"."+k.field.Name]
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.Key, typeName(k.typ()), operatorText(doc, k.field.Name, names))
	}
	b.WriteString(envDocHeader)
	for _, k := range keys {
		if k.Env == "" {
			continue
		}
		key := "`" + k.Key + "`"
		switch t := k.typ(); {
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
			key += " (the whole list, every `" + k.Key + "[]` key in it)"
		case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
			key += " (the whole map, every `" + k.Key + ".<" + mapKeyName(k.field.Tag.Get("yaml")) + ">` key in it)"
		case t.Kind() == reflect.Slice, t.Kind() == reflect.Map:
			key += " (the whole " + map[bool]string{true: "list", false: "map"}[t.Kind() == reflect.Slice] + ")"
		}
		if a := envAliases[k.Key]; a != "" {
			key += "; also read from `" + a + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.Env, key)
	}
	b.WriteString(deprecatedDocHeader)
	for _, d := range deprecatedSpellings() {
		fmt.Fprintf(&b, "| `%s` | `%s` |\n", d[0], d[1])
	}
	b.WriteString(configDocFooter)
	return b.String(), nil
}

// owners returns the struct type declaring each of keys, found by the
// path of the section, list or map the key is in (configKeys lists it
// before its keys).
func owners(keys []configKey) []reflect.Type {
	structs := map[string]reflect.Type{"": reflect.TypeFor[Config]()} // a key's path without its name -> the struct declaring it
	out := make([]reflect.Type, len(keys))
	for i, k := range keys {
		tag, _, _ := strings.Cut(k.field.Tag.Get("yaml"), ",")
		out[i] = structs[strings.TrimSuffix(k.Key, tag)]
		switch t := k.typ(); {
		case k.isSection():
			structs[k.Key+"."] = t
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
			structs[k.Key+"[]."] = t.Elem()
		case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
			structs[k.Key+".<"+mapKeyName(tag)+">."] = t.Elem()
		}
	}
	return out
}

// goName is a Go identifier in a doc comment, with an optional "Config."
// qualifier: a capital, then at least one lower-case letter.
var goName = regexp.MustCompile(`(?:Config\.)?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*`)

// operatorText rewords the doc comment of field for operators: without the
// field's Go name in front ("Listen is the address..." becomes "The
// address..."), and with the Go name of every other config key replaced by
// the key (AllowedUsers becomes ` + "`allowed_users`" + `). names maps Go names to
// keys; a word inside a hyphenated name (X-Telegram-Bot-Api-Secret-Token)
// is left alone.
func operatorText(doc, field string, names map[string]string) string {
	for _, lead := range []string{field + " is ", field + " are ", field + " "} {
		if rest, ok := strings.CutPrefix(doc, lead); ok && rest != "" {
			doc = rest
			if word, _, _ := strings.Cut(rest, " "); strings.ToLower(word) == word {
				doc = strings.ToUpper(rest[:1]) + rest[1:]
			}
			break
		}
	}
	var b strings.Builder
	last := 0
	for _, m := range goName.FindAllStringIndex(doc, -1) {
		name := strings.TrimPrefix(doc[m[0]:m[1]], "Config.")
		key, ok := names[name]
		hyphenated := m[0] > 0 && doc[m[0]-1] == '-' || m[1] < len(doc) && doc[m[1]] == '-'
		if !ok || hyphenated || m[0] > 0 && isWordByte(doc[m[0]-1]) {
			continue
		}
		b.WriteString(doc[last:m[0]])
		b.WriteString("`" + key + "`")
		last = m[1]
	}
	b.WriteString(doc[last:])
	return b.String()
}

// isWordByte reports whether c continues a word.
func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
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
var configDocDirs = []string{"cmd/connector", "store", "relay", "enroll", "media", "registry", "platform/discord", "platform/telegram", "platform/slack", "platform/whatsapp", "platform/nexscope"}

const configDocHeader = `# Configuration reference

<!-- Generated from the Config struct by ` + "`go test ./cmd/connector -run TestConfigurationDoc -update`" + `.
     TestConfigurationDoc fails when this file and the code disagree: edit the Go doc comments, not this file. -->

The connector reads one YAML file: ` + "`-config FILE`" + `, else ` + "`$CONNECTOR_CONFIG`" + `, else the first of
` + "`./connector.yaml`" + ` and ` + "`/etc/connector/connector.yaml`" + ` that exists; with none it runs on embedded
defaults (see the README), and the log says which it did. Unknown keys and invalid values are
errors that name the key; ` + "`connector serve -config FILE -check`" + ` validates a file, and that
` + "`store.path`" + ` and ` + "`media.dir`" + ` can be created (it leaves nothing there), and exits, and
` + "`connector config example`" + ` prints a commented example. Every key is optional unless its
description says otherwise; a missing key takes the default its description names. A duration
is either unset or at least 1ms (or the longer minimum its description names), and a number is
never negative unless its description says what negative means. Every key can also be set from the environment
([the table after the keys](#environment-variables-for-keys)), and a few older key spellings are still read ([deprecated keys](#deprecated-keys)).

Environment variables besides the keys' (a set variable overrides the file):

| variable | effect |
|---|---|
| ` + "`CONNECTOR_CONFIG`" + ` | the config file, when ` + "`-config`" + ` is not given |
| ` + "`CONNECTOR_GATEWAY_SECRETS_<ID>`" + ` | extra secrets (comma-separated) of gateway ` + "`<ID>`" + ` (upper-cased, other characters as ` + "`_`" + `), added to its ` + "`secrets`" + ` |

| key | type | description |
|---|---|---|
`

// envDocHeader introduces the generated table of key variables.
const envDocHeader = `
## Environment variables for keys

Every key has a variable: ` + "`CONNECTOR_`" + ` and the key upper-cased, dots as underscores
(` + "`store.path`, `store.redis_url` and `store.instance`" + ` keep the names they had). A variable set
to a non-empty value overrides the file; ` + "`-listen` and `-data-dir`" + ` override both. A string is
taken as written; any other value is written as in the file (` + "`30s`, `true`, `8388608`" + `). A
variable of a key in ` + "`discord`, `telegram` or `nexscope`" + ` enables that platform, as its section
does in the file. A platform's credentials are also read from the names the Hermes gateway's
own adapters use (` + "`DISCORD_BOT_TOKEN`" + `), when the key's own variable is unset.

A list or a map is set whole, in YAML flow or JSON form, and replaces the file's:
` + "`CONNECTOR_TENANTS='[{id: acme, gateways: [{id: acme-gw1}]}]'`" + ` (with
` + "`CONNECTOR_GATEWAY_SECRETS_ACME_GW1`" + ` for the secret), ` + "`CONNECTOR_TELEGRAM_CHATS='{\"-1001234567890\": acme}'`" + `,
` + "`CONNECTOR_DISCORD_TENANTS='{acme: {require_mention: false, weight: 2}}'`" + `. The keys inside a list
item or a map entry (` + "`tenants[].id`, `discord.tenants.<tenant>.weight`" + `) have no variable of
their own: which items and entries exist is the list's or map's value, so a variable per item
would have to name an item the environment cannot define. To configure from the environment
alone, give an empty file (` + "`-config /dev/null`" + `): with no file at all the connector runs on its
embedded defaults, which the variables then adjust.

| variable | key |
|---|---|
`

// deprecatedDocHeader introduces the table of older key spellings.
const deprecatedDocHeader = `
## Deprecated keys

These older spellings are still read, as the key that replaced them; the connector logs a
warning naming both at start. A file that writes both spellings of one key is refused.

| older spelling | write instead |
|---|---|
`

const configDocFooter = `
## Example

` + "```yaml" + `
` + exampleConfig + "```" + `
`

// deprecatedSpellings lists every older spelling and the key to write
// instead, for docs/configuration.md.
func deprecatedSpellings() [][2]string {
	var out [][2]string
	for _, r := range renamedKeys {
		out = append(out, [2]string{r.section + "." + r.old, r.section + "." + r.new})
	}
	return append(out, movedWeights)
}
