package main

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownField is one line of a yaml.TypeError for a key no struct has.
// Platform sections that decode themselves report it inside their own
// error, so it is matched anywhere in a message.
var unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type (\S+)`)

// parseDocument parses a YAML document; a syntax error says its line.
func parseDocument(data []byte) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, errors.New(syntaxLine(data, strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	return &root, nil
}

// yamlLine splits the "line N: problem" of a YAML syntax error.
var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// maxLinesScanned bounds the documents syntaxLine re-reads.
const maxLinesScanned = 10_000

// syntaxLine corrects the line of a syntax error msg of data. The YAML
// parser reports the line where the block holding the problem starts (a
// bad indent on line 4 under a list that starts on line 2 is "line 2");
// the problem is on the first line at which the document, cut after it,
// fails with the same problem. That line is named, and the block's when
// they differ.
func syntaxLine(data []byte, msg string) string {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	block, _ := strconv.Atoi(m[1])
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxLinesScanned {
		return msg
	}
	end := 0
	for i, l := range lines {
		end += len(l)
		if i+1 < block {
			continue
		}
		var n yaml.Node
		err := yaml.Unmarshal(data[:end], &n)
		if err == nil {
			continue
		}
		if p := yamlLine.FindStringSubmatch(strings.TrimPrefix(err.Error(), "yaml: ")); p != nil && p[2] == m[2] {
			if i+1 == block {
				return msg
			}
			return fmt.Sprintf("line %d: %s (in the block that starts on line %d)", i+1, m[2], block)
		}
	}
	return msg
}

// decodeValue decodes the YAML document data into out, which key (empty
// for the whole file) holds, as decodeNode does.
func decodeValue(data []byte, out any, key string, withLines bool) error {
	root, err := parseDocument(data)
	if err != nil {
		return err
	}
	return decodeNode(root, out, key, withLines)
}

// decodeNode decodes the parsed document root into out, which key holds:
// every mapping key in it must be one out reads, and each error names the
// offending key path under key, its line when withLines, and the fix where
// one can be told.
func decodeNode(root *yaml.Node, out any, key string, withLines bool) error {
	if root.Kind == 0 {
		return nil // an empty document
	}
	var unknown []string
	unknownKeys(root, reflect.TypeOf(out).Elem(), key, &unknown, map[aliasWalk]bool{})
	if len(unknown) > 0 {
		return errors.New(joinProblems(unknown, len(unknown)))
	}
	err := root.Decode(out)
	if err == nil {
		return nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := err.Error()
		if m := unknownField.FindAllStringSubmatch(msg, -1); m != nil {
			parts := make([]string, len(m))
			for i, f := range m {
				parts[i] = fmt.Sprintf("unknown key %q (line %s)", f[2], f[1])
			}
			return errors.New(joinProblems(parts, len(parts)))
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		if m := tagMismatch.FindStringSubmatch(msg); m != nil {
			return errors.New(explainTagMismatch(root, reflect.TypeOf(out).Elem(), key, m[1], m[2], withLines))
		}
		return errors.New(msg)
	}
	return errors.New(joinProblems(explainTypeError(root, reflect.TypeOf(out).Elem(), key, te, withLines), len(te.Errors)))
}

// tagMismatch is the error of a value its explicit tag does not fit
// (bot_token: !!int abc), which yaml writes with the whole value.
var tagMismatch = regexp.MustCompile("(?s)^cannot decode !!\\w+ `(.*)` as a !!(\\w+)$")

// explainTagMismatch names the key of the value its tag does not fit,
// found as explainTypeError finds a key, never the value (it may be a
// secret).
func explainTagMismatch(root *yaml.Node, t reflect.Type, key, value, tag string, withLines bool) string {
	var values []keyedValue
	collectValues(root, t, key, &values)
	at := "a value"
	for _, v := range values {
		if v.node.Kind == yaml.ScalarNode && v.node.Value == value && v.node.ShortTag() == "!!"+tag {
			at = v.key
			if withLines {
				at = fmt.Sprintf("%s (line %d)", at, v.node.Line)
			}
			break
		}
	}
	return fmt.Sprintf("%s: tagged !!%s but not one; remove the tag", at, tag)
}

// maxProblems is how many problems of a document an error names: each
// type error is placed by a scan of the document's values, and thousands
// make a message nobody reads (and took minutes to place).
const maxProblems = 10

// joinProblems joins the first maxProblems of a document's n problems,
// saying how many more there are.
func joinProblems(problems []string, n int) string {
	msg := strings.Join(problems[:min(len(problems), maxProblems)], "; ")
	if n > maxProblems {
		msg += fmt.Sprintf("; and %d more", n-maxProblems)
	}
	return msg
}

// unmarshalerType is implemented by the types that read their own keys
// (and refuse unknown ones themselves).
var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// unknownKeys appends to out each mapping key under n that no field of t
// reads, by its path under key and its line. Values of the wrong kind are
// left to the decoder to report.
func unknownKeys(n *yaml.Node, t reflect.Type, key string, out *[]string, walked map[aliasWalk]bool) {
	if n.Kind == yaml.AliasNode {
		// Once per anchor and type: a chain of anchors each merging the
		// one before several times would be walked exponentially often
		// (a 1 KB file for hours); the decoder bounds aliasing, this
		// walk before it does not.
		if walked[aliasWalk{n.Alias, t}] {
			return
		}
		walked[aliasWalk{n.Alias, t}] = true
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			unknownKeys(c, t, key, out, walked)
		}
		return
	}
	t = derefType(t)
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge: its mappings' keys are this one's
				unknownKeys(v, t, key, out, walked)
				continue
			}
			f, ok := fieldByKey(t, k.Value)
			if !ok {
				where := ""
				if key != "" {
					where = " in " + key
				}
				*out = append(*out, fmt.Sprintf("unknown key %q%s (line %d)", k.Value, where, k.Line))
				continue
			}
			unknownKeys(v, f.Type, joinKey(key, k.Value), out, walked)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			unknownKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", key, i), out, walked)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			unknownKeys(n.Content[i+1], t.Elem(), joinKey(key, n.Content[i].Value), out, walked)
		}
	}
}

// aliasWalk is an anchored node unknownKeys walked as a value of type t.
type aliasWalk struct {
	n *yaml.Node
	t reflect.Type
}

// fieldByKey is the field of struct type t that YAML key name sets.
func fieldByKey(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// joinKey appends name to the key path key.
func joinKey(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}

// typeErrorLine is one line of a yaml.TypeError: a value of the wrong kind.
var typeErrorLine = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")

// explainTypeError rewrites the lines of a yaml.TypeError so each names the
// key (found in the document's node tree by line, value and the Go type
// it decodes into; root holds key, of type t) and, where it can, the fix:
// "shutdown_grace (line 2): 30 has no unit; write a duration such as
// 30s". The value of a key holding a secret is not repeated. Lines it
// cannot place are kept as yaml wrote them.
func explainTypeError(root *yaml.Node, t reflect.Type, key string, te *yaml.TypeError, withLines bool) []string {
	var values []keyedValue
	if key != "" && root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		values = append(values, keyedValue{key, root.Content[0], derefType(t)})
	}
	collectValues(root, t, key, &values)
	placed := make(map[*yaml.Node]bool)
	out := make([]string, 0, maxProblems)
	for _, line := range te.Errors[:min(len(te.Errors), maxProblems)] { // each is placed by a scan of values
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
		at := keyAt(values, placed, n, tag, value, into)
		if at == "" {
			out = append(out, line)
			continue
		}
		if holdsSecret(at) {
			value = ""
		}
		if withLines {
			at = fmt.Sprintf("%s (line %d)", at, n)
		}
		out = append(out, fmt.Sprintf("%s: %s", at, typeHint(tag, value, into)))
	}
	return out
}

// holdsSecret reports whether the key path names a secret: a token, a
// secret, a password or the Redis URL (which may carry a password).
func holdsSecret(key string) bool {
	last := key[strings.LastIndexByte(key, '.')+1:]
	return strings.Contains(last, "token") || strings.Contains(last, "secret") || strings.Contains(last, "password") ||
		strings.HasPrefix(last, "redis_url")
}

// keyedValue is a value node, the key path that leads to it and the Go
// type it decodes into (nil: not known, as inside a section that decodes
// itself).
type keyedValue struct {
	key  string
	node *yaml.Node
	typ  reflect.Type
}

// collectValues lists every mapping value and sequence item under n, of
// Go type t (nil: not known), with its key path (relay.ack_window,
// tenants[0].gateways[0].secrets) and type.
func collectValues(n *yaml.Node, t reflect.Type, prefix string, out *[]keyedValue) {
	t = derefType(t)
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		t = nil // its keys are its own
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectValues(c, t, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			key := joinKey(prefix, name)
			var vt reflect.Type
			switch {
			case t == nil:
			case t.Kind() == reflect.Map:
				vt = t.Elem()
			case t.Kind() == reflect.Struct && name == "<<": // a merge: its mappings' keys are this one's
				vt = t
			case t.Kind() == reflect.Struct:
				if f, ok := fieldByKey(t, name); ok {
					vt = f.Type
				}
			}
			*out = append(*out, keyedValue{key, n.Content[i+1], derefType(vt)})
			collectValues(n.Content[i+1], vt, key, out)
		}
	case yaml.SequenceNode:
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i, c := range n.Content {
			key := fmt.Sprintf("%s[%d]", prefix, i)
			*out = append(*out, keyedValue{key, c, derefType(et)})
			collectValues(c, et, key, out)
		}
	}
}

// derefType is t without its pointers: the type yaml decodes into.
func derefType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// keyAt returns the key of the value on line whose kind is tag and, for a
// scalar, whose text is value, not placed yet, which it then marks
// placed; "" when none is. Of several, the first that decodes into the Go
// type into is it, else the first (its type not known, or spelt
// otherwise). yaml shortens a value of more than 10 bytes to its first 7
// and "...", which then matches by those (so a long secret is placed, and
// hidden, too).
func keyAt(values []keyedValue, placed map[*yaml.Node]bool, line int, tag, value, into string) string {
	short, shortened := strings.CutSuffix(value, "...")
	shortened = shortened && len(short) == 7
	var first *keyedValue
	for i, v := range values {
		if placed[v.node] || v.node.Line != line || strings.TrimPrefix(v.node.ShortTag(), "!!") != tag {
			continue
		}
		if v.node.Kind == yaml.ScalarNode && v.node.Value != value &&
			!(shortened && len(v.node.Value) > 10 && strings.HasPrefix(v.node.Value, short)) {
			continue
		}
		if v.typ != nil && v.typ.String() == into {
			first = &values[i]
			break
		}
		if first == nil {
			first = &values[i]
		}
	}
	if first == nil {
		return ""
	}
	placed[first.node] = true
	return first.key
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
