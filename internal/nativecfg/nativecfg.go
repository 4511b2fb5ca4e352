// Package nativecfg reads a tenant's adapter setting the way the native
// Hermes adapters read the same setting: the gateway loads config.yaml with
// PyYAML (YAML 1.1), its bridge writes each value into the adapter's
// environment variable (str(value); a list joined with commas), and the
// adapter parses that text. The Discord and Telegram platforms read their
// tenant knobs through it, so these rules have one owner;
// docs/settings-parity.md lists what each platform does with them.
package nativecfg

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Flag reads a boolean knob. A YAML boolean (including YAML 1.1's plain
// yes/no/on/off, as the native loader reads them) is that value; any other
// scalar is the knob's environment-variable spelling (see ParseFlag). Null
// is unset (nil).
func Flag(n *yaml.Node, onIsTrue bool) (*bool, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("want a boolean")
	}
	if n.Tag == "!!null" {
		return nil, nil
	}
	if IsYAML11Bool(n) {
		v := yaml11True[n.Value]
		return &v, nil
	}
	v, err := ParseFlag(n.Value, onIsTrue)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// FlagOr is the value of a boolean knob Flag read, def when it is unset.
func FlagOr(v *bool, def bool) bool {
	if v == nil {
		return def
	}
	return *v
}

// ParseFlag reads the environment-variable spelling of a boolean, trimmed
// and case-folded: true/false, 1/0, yes/no, on/off. onIsTrue is false for
// the variables whose rule counts only true, 1 and yes as true (on then
// means false). Any other word is an error: the native adapters would read
// it as one value or the other without saying so.
func ParseFlag(s string, onIsTrue bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, nil
	case "on":
		return onIsTrue, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (want true/false, 1/0, yes/no or on/off)", s)
}

// yaml11True holds the plain scalars YAML 1.1 reads as true; yaml11False
// those it reads as false.
var (
	yaml11True  = map[string]bool{"true": true, "True": true, "TRUE": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true}
	yaml11False = map[string]bool{"false": true, "False": true, "FALSE": true, "no": true, "No": true, "NO": true, "off": true, "Off": true, "OFF": true}
)

// plain reports whether n is a plain (unquoted, untagged) scalar, the only
// kind YAML 1.1 resolves to a boolean, number or null by its text.
func plain(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode &&
		n.Style&(yaml.TaggedStyle|yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
}

// IsYAML11Bool reports whether n is a plain scalar YAML 1.1 reads as a
// boolean.
func IsYAML11Bool(n *yaml.Node) bool {
	return plain(n) && (yaml11True[n.Value] || yaml11False[n.Value])
}

// PyYAML's resolvers for the scalar kinds that are not strings.
var (
	yaml11Int   = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	yaml11Float = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yaml11Null  = map[string]bool{"": true, "~": true, "null": true, "Null": true, "NULL": true}
)

// IsYAML11String reports whether YAML 1.1 reads scalar n as a string: it is
// quoted, a block scalar, tagged !!str, or plain text that is not a
// boolean, integer, float or null.
func IsYAML11String(n *yaml.Node) bool {
	switch {
	case n.Kind != yaml.ScalarNode:
		return false
	case !plain(n):
		return n.Style&yaml.TaggedStyle == 0 || n.Tag == "!!str"
	}
	v := n.Value
	return !yaml11True[v] && !yaml11False[v] && !yaml11Null[v] && !yaml11Int.MatchString(v) && !yaml11Float.MatchString(v)
}

// Bridged is the text the native bridge writes for scalar n, str() of the
// value PyYAML reads: a plain YAML 1.1 integer in decimal (010 is octal, so
// "8"; 0x1F is "31"; 1_000 is "1000"; 1:30 is sexagesimal, "90"), a plain
// boolean as "True" or "False", null as "None"; anything else as written.
func Bridged(n *yaml.Node) string {
	v := n.Value
	switch {
	case !plain(n):
		return v
	case yaml11True[v]:
		return "True"
	case yaml11False[v]:
		return "False"
	case yaml11Null[v]:
		return "None"
	case yaml11Int.MatchString(v):
		if i, ok := yaml11IntValue(v); ok {
			return i.String()
		}
	}
	return v
}

// yaml11IntValue is PyYAML's construct_yaml_int.
func yaml11IntValue(s string) (*big.Int, bool) {
	s = strings.ReplaceAll(s, "_", "")
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	v := new(big.Int)
	ok := true
	switch {
	case s == "0":
	case strings.HasPrefix(s, "0b"):
		_, ok = v.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = v.SetString(s[2:], 16)
	case strings.HasPrefix(s, "0"):
		_, ok = v.SetString(s, 8)
	case strings.Contains(s, ":"):
		for part := range strings.SplitSeq(s, ":") {
			d, dok := new(big.Int).SetString(part, 10)
			if !dok {
				return nil, false
			}
			v.Mul(v, big.NewInt(60)).Add(v, d)
		}
	default:
		_, ok = v.SetString(s, 10)
	}
	if neg {
		v.Neg(v)
	}
	return v, ok
}

// List reads a list knob as the native bridge writes it into the
// adapter's variable: a YAML sequence or a single scalar (a bare number, or
// a comma-separated string as in the environment variables), every scalar
// as its Bridged text (a bare 010 is "8"; a null list item is "None", as in
// the bridge's join). Split splits and trims the items.
func List(n *yaml.Node) ([]string, error) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil, nil
	case n.Kind == yaml.ScalarNode:
		return []string{Bridged(n)}, nil
	case n.Kind == yaml.SequenceNode:
		items := make([]string, 0, len(n.Content))
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: want a list of ids or names", item.Line)
			}
			items = append(items, Bridged(item))
		}
		return items, nil
	}
	return nil, fmt.Errorf("want a list or a comma-separated string")
}

// Split splits every entry on commas (the native bridge joins a YAML list
// with commas into the variable and the adapter splits it again), trims
// the parts and drops empty ones.
func Split(entries []string) []string {
	var out []string
	for _, e := range entries {
		for part := range strings.SplitSeq(e, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// DecodeList reads the variable of a list knob the way the native
// decode_json_list_literal readers do: the entries are joined with commas
// (as the bridge writes them); text that starts with "[" and parses as a
// JSON list is that list, each string or integer element trimmed;
// anything else is split on commas (Split). An element of another JSON
// type is an error.
func DecodeList(entries []string) ([]string, error) {
	joined := strings.Join(entries, ",")
	if !strings.HasPrefix(strings.TrimLeft(joined, " \t\r\n\v\f"), "[") {
		return Split(entries), nil
	}
	dec := json.NewDecoder(strings.NewReader(joined))
	dec.UseNumber()
	var elems []any
	if err := dec.Decode(&elems); err != nil || dec.More() {
		return Split(entries), nil
	}
	var out []string
	for _, e := range elems {
		var s string
		switch v := e.(type) {
		case string:
			s = v
		case json.Number:
			i, ok := new(big.Int).SetString(v.String(), 10)
			if !ok {
				return nil, fmt.Errorf("JSON list element %s is not an integer", v)
			}
			s = i.String()
		default:
			return nil, fmt.Errorf("JSON list element %v is not a string or an integer", e)
		}
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// Knob reads one YAML key of a tenant's settings into *T.
type Knob[T any] func(*T, *yaml.Node) error

// ReadKnobs reads a tenant's settings mapping into dst key by key, each
// with its reader in knobs; null is no settings. what names the settings in
// errors ("discord tenant": "line 3: discord tenant setting auto_thread:
// want a boolean"). A key without a reader gets yaml's own unknown-field
// wording ("field x not found in type discord.TenantConfig"), so the config
// loader reports it like every other unknown key.
func ReadKnobs[T any](node *yaml.Node, dst *T, what string, knobs map[string]Knob[T]) error {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s settings: want a mapping", node.Line, what)
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, value := node.Content[i], node.Content[i+1]
		read, ok := knobs[key.Value]
		if !ok {
			return fmt.Errorf("line %d: field %s not found in type %T", key.Line, key.Value, *dst)
		}
		if err := read(dst, value); err != nil {
			return fmt.Errorf("line %d: %s setting %s: %w", value.Line, what, key.Value, err)
		}
	}
	return nil
}

// FlagKnob reads a boolean knob into the field field points at (Flag;
// onIsTrue as there).
func FlagKnob[T any](field func(*T) **bool, onIsTrue bool) Knob[T] {
	return knobInto(field, func(n *yaml.Node) (*bool, error) { return Flag(n, onIsTrue) })
}

// ListKnob reads a list knob into the field field points at, as the native
// bridge writes it (List: a bare 010 is YAML 1.1's octal 8); the platform
// splits and checks the items.
func ListKnob[T any](field func(*T) *[]string) Knob[T] { return knobInto(field, List) }

// knobInto is the knob that sets the field field points at to what read
// makes of the node.
func knobInto[T, V any](field func(*T) *V, read func(*yaml.Node) (V, error)) Knob[T] {
	return func(dst *T, n *yaml.Node) error {
		v, err := read(n)
		if err != nil {
			return err
		}
		*field(dst) = v
		return nil
	}
}

// PatternsKnob reads mention_patterns into the field field points at: one
// string is one pattern, a list holds patterns. The native adapter silently
// skips what YAML reads as a number, boolean or null; those are refused.
func PatternsKnob[T any](field func(*T) *[]string) Knob[T] {
	return knobInto(field, func(n *yaml.Node) ([]string, error) {
		switch {
		case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
			return nil, nil
		case n.Kind == yaml.ScalarNode && IsYAML11String(n):
			return []string{n.Value}, nil
		case n.Kind == yaml.SequenceNode:
			patterns := make([]string, 0, len(n.Content))
			for i, item := range n.Content {
				if !IsYAML11String(item) {
					return nil, fmt.Errorf("[%d]: %q is not a string to YAML 1.1, so the native adapter skips it; quote it", i, item.Value)
				}
				patterns = append(patterns, item.Value)
			}
			return patterns, nil
		}
		return nil, fmt.Errorf("want a list of regular expressions or one (a bare number or boolean is not a string to YAML 1.1; quote it)")
	})
}

// CompilePatterns compiles mention_patterns, searched case-insensitively;
// blank patterns are skipped as the native adapter skips them, and one Go's
// regexp cannot compile (Python-only syntax such as lookarounds) is refused
// with an error that starts with the YAML key.
func CompilePatterns(patterns []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for i, pat := range patterns {
		if strings.TrimSpace(pat) == "" {
			continue
		}
		re, err := regexp.Compile("(?i)" + pat)
		if err != nil {
			return nil, fmt.Errorf("mention_patterns[%d]: %q: Go's regexp cannot compile it: %w", i, pat, err)
		}
		out = append(out, re)
	}
	return out, nil
}
