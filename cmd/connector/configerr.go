package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownField is one line of a yaml.TypeError for a key no struct has.
// Platform sections that decode themselves report it inside their own
// error, so it is matched anywhere in a message.
var unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type (\S+)`)

// describeDecodeError turns a decoding error of the config document data
// into one that names each offending key and its line, with the fix where
// one can be told.
func describeDecodeError(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := err.Error()
		if m := unknownField.FindAllStringSubmatch(msg, -1); m != nil {
			parts := make([]string, len(m))
			for i, f := range m {
				parts[i] = fmt.Sprintf("unknown key %q (line %s)", f[2], f[1])
			}
			return fmt.Errorf("config: %s", strings.Join(parts, "; "))
		}
		return fmt.Errorf("config: %s", strings.TrimPrefix(msg, "yaml: "))
	}
	return fmt.Errorf("config: %s", strings.Join(explainTypeError(data, te), "; "))
}

// typeErrorLine is one line of a yaml.TypeError: a value of the wrong kind.
var typeErrorLine = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")

// explainTypeError rewrites the lines of a yaml.TypeError so each names the
// key (found in the document's node tree by line and value) and, where it
// can, the fix: "shutdown_grace (line 2): 30 has no unit; write a duration
// such as 30s". Lines it cannot place are kept as yaml wrote them.
func explainTypeError(data []byte, te *yaml.TypeError) []string {
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	var values []keyedValue
	collectValues(&root, "", &values)
	out := make([]string, 0, len(te.Errors))
	for _, line := range te.Errors {
		if f := unknownField.FindStringSubmatch(line); f != nil {
			out = append(out, fmt.Sprintf("unknown key %q (line %s)", f[2], f[1]))
			continue
		}
		m := typeErrorLine.FindStringSubmatch(line)
		if m == nil {
			out = append(out, line)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		tag, value, into := m[2], m[3], m[4]
		key := keyAt(values, n, tag, value)
		if key == "" {
			out = append(out, line)
			continue
		}
		out = append(out, fmt.Sprintf("%s (line %d): %s", key, n, typeHint(tag, value, into)))
	}
	return out
}

// keyedValue is a value node and the key path that leads to it.
type keyedValue struct {
	key  string
	node *yaml.Node
}

// collectValues lists every mapping value and sequence item under n with
// its key path (relay.ack_window, tenants[0].gateways[0].secrets).
func collectValues(n *yaml.Node, prefix string, out *[]keyedValue) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectValues(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if prefix != "" {
				key = prefix + "." + key
			}
			*out = append(*out, keyedValue{key, n.Content[i+1]})
			collectValues(n.Content[i+1], key, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			key := fmt.Sprintf("%s[%d]", prefix, i)
			*out = append(*out, keyedValue{key, c})
			collectValues(c, key, out)
		}
	}
}

// keyAt returns the key of the value on line whose kind is tag and, for a
// scalar, whose text is value; "" when none is.
func keyAt(values []keyedValue, line int, tag, value string) string {
	for _, v := range values {
		if v.node.Line != line || shortTag(v.node) != tag {
			continue
		}
		if v.node.Kind == yaml.ScalarNode && v.node.Value != value {
			continue
		}
		return v.key
	}
	return ""
}

// shortTag is n's resolved tag without "!!" (str, int, map, seq, ...).
func shortTag(n *yaml.Node) string {
	return strings.TrimPrefix(n.ShortTag(), "!!")
}

// typeHint says what was expected instead of a tag value, and how to write it.
func typeHint(tag, value, into string) string {
	got := tagNoun(tag)
	if value != "" {
		got = strconv.Quote(value)
	}
	switch {
	case into == "time.Duration" && (tag == "int" || tag == "float"):
		return fmt.Sprintf("%s has no unit; write a duration such as %ss (units: ms, s, m, h)", value, value)
	case into == "time.Duration":
		return fmt.Sprintf("%s is not a duration; write one such as 30s or 5m", got)
	case strings.HasPrefix(into, "int") || strings.HasPrefix(into, "uint"):
		return fmt.Sprintf("%s is not a whole number; write digits only, such as 256", got)
	case strings.HasPrefix(into, "float"):
		return fmt.Sprintf("%s is not a number", got)
	case into == "bool":
		return fmt.Sprintf("%s is not a boolean; write true or false", got)
	case into == "string":
		return fmt.Sprintf("%s where a single value belongs; quote it if it is meant as text", got)
	case strings.HasPrefix(into, "[]"):
		return fmt.Sprintf("%s where a list belongs; write [a, b] or one \"- item\" per line", got)
	case strings.HasPrefix(into, "map[") || strings.HasPrefix(into, "struct") || strings.Contains(into, "Config"):
		return fmt.Sprintf("%s where a section of keys belongs; write key: value lines indented under it", got)
	}
	return fmt.Sprintf("%s cannot be read as %s", got, into)
}

// tagNoun names a YAML kind for a message.
func tagNoun(tag string) string {
	switch tag {
	case "map":
		return "a section of keys"
	case "seq":
		return "a list"
	case "null":
		return "an empty value"
	}
	return "a " + tag
}
