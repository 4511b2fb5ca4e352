package main

import (
	"fmt"
	"log/slog"

	"go.yaml.in/yaml/v3"
)

// This file owns the config keys' older spellings: a file that uses one is
// read as if it used the current key, and serve logs a deprecation warning
// naming both. Writing both spellings of one key is an error.

// deprecation is one older spelling found in a config file.
type deprecation struct {
	Old, New string // telegram.token, telegram.bot_token
	Line     int
}

// renamedKeys are keys renamed within their section so that the platforms
// spell the same setting alike. telegram.tenant_weights.<tenant> moved to
// telegram.tenants.<tenant>.weight, as Discord has it (moveWeights).
var renamedKeys = []struct{ section, old, new string }{
	{"telegram", "token", "bot_token"},              // as discord.bot_token
	{"discord", "global_rate", "global_per_second"}, // as telegram.global_per_second
}

// movedWeights are the older and current spellings of a Telegram tenant's
// weight.
var movedWeights = [2]string{"telegram.tenant_weights.<tenant>", "telegram.tenants.<tenant>.weight"}

// migrateKeys rewrites, in the parsed config document doc, every older
// spelling to the current key and returns what it rewrote.
func migrateKeys(doc *yaml.Node) ([]deprecation, error) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil // not a config document; decoding says why
	}
	var found []deprecation
	for _, r := range renamedKeys {
		section := mappingValue(doc.Content[0], r.section)
		if section == nil || section.Kind != yaml.MappingNode {
			continue
		}
		i := keyIndex(section, r.old)
		if i < 0 {
			continue
		}
		d := deprecation{Old: r.section + "." + r.old, New: r.section + "." + r.new, Line: section.Content[i].Line}
		if j := keyIndex(section, r.new); j >= 0 {
			return nil, bothSet(d.Old, d.Line, d.New, section.Content[j].Line)
		}
		section.Content[i].Value = r.new
		found = append(found, d)
	}
	if telegram := mappingValue(doc.Content[0], "telegram"); telegram != nil && telegram.Kind == yaml.MappingNode {
		if i := keyIndex(telegram, "tenant_weights"); i >= 0 {
			found = append(found, deprecation{Old: "telegram.tenant_weights", New: movedWeights[1], Line: telegram.Content[i].Line})
			if err := moveWeights(telegram, i); err != nil {
				return nil, err
			}
		}
	}
	return found, nil
}

// moveWeights moves each entry of the tenant_weights map at index i of the
// telegram section into tenants.<tenant>.weight.
func moveWeights(telegram *yaml.Node, i int) error {
	line, weights := telegram.Content[i].Line, telegram.Content[i+1]
	switch {
	case weights.Kind == yaml.ScalarNode && weights.Tag == "!!null":
	case weights.Kind != yaml.MappingNode:
		return fmt.Errorf("config: telegram.tenant_weights (line %d): want a map of tenant to weight; write it as telegram.tenants.<tenant>.weight", line)
	default:
		tenants := mappingAt(telegram, "tenants", line)
		if tenants.Kind != yaml.MappingNode {
			return fmt.Errorf("config: telegram.tenants (line %d): want a map of tenant to settings", tenants.Line)
		}
		for j := 0; j+1 < len(weights.Content); j += 2 {
			name, weight := weights.Content[j], weights.Content[j+1]
			tenant := mappingAt(tenants, name.Value, name.Line)
			if tenant.Kind != yaml.MappingNode {
				return fmt.Errorf("config: telegram.tenants.%s (line %d): want a map of settings", name.Value, tenant.Line)
			}
			if k := keyIndex(tenant, "weight"); k >= 0 {
				return bothSet("telegram.tenant_weights."+name.Value, name.Line, "telegram.tenants."+name.Value+".weight", tenant.Content[k].Line)
			}
			tenant.Content = append(tenant.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "weight", Line: name.Line}, weight)
		}
	}
	telegram.Content = append(telegram.Content[:i], telegram.Content[i+2:]...)
	return nil
}

// mappingAt is the value of key name in mapping m, added (at line) when
// missing and made an empty mapping when null; any other kind is left for
// the caller to refuse.
func mappingAt(m *yaml.Node, name string, line int) *yaml.Node {
	v := mappingValue(m, name)
	if v == nil {
		v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Line: line}, v)
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: v.Line}
	}
	return v
}

// bothSet is the error for a key written in both spellings.
func bothSet(old string, oldLine int, current string, line int) error {
	return fmt.Errorf("config: %s (line %d) is the older spelling of %s (line %d); keep only %s", old, oldLine, current, line, current)
}

// keyIndex is the index in mapping m's Content of key name, or -1.
func keyIndex(m *yaml.Node, name string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return i
		}
	}
	return -1
}

// mappingValue is the value of key name in mapping m, or nil.
func mappingValue(m *yaml.Node, name string) *yaml.Node {
	if i := keyIndex(m, name); i >= 0 {
		return m.Content[i+1]
	}
	return nil
}

// logDeprecations warns once per older spelling the config file used.
func logDeprecations(log *slog.Logger, found []deprecation) {
	for _, d := range found {
		log.Warn("config: deprecated key; it still works but will be removed", "key", d.Old, "line", d.Line, "use", d.New)
	}
}
