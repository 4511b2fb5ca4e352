package slack

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"connector/internal/pytext"
)

// This file writes the native adapter's view of a message's other Block
// Kit blocks into its text (_serialize_slack_blocks_for_agent): the
// blocks that are not rich_text or table (those are rendered as text,
// blocks.go), each reduced to an allowlist of keys (no url, no value), as
// indented JSON in a fence, cut at 6,000 characters. The JSON is the
// native adapter's own to the character: keys in the order the message
// had them, Python's json.dumps(indent=2, ensure_ascii=False) spacing,
// escapes and number forms.

// maxBlockPayload bounds the dump's JSON, in characters (code points).
const maxBlockPayload = 6000

// maxDumpBytes is where writing the dump stops: past it the dump is cut
// at maxBlockPayload characters whatever follows (a character takes at
// most 4 bytes). A deeply nested block's indentation grows with the
// square of its depth; it is never written beyond this.
const maxDumpBytes = 4*maxBlockPayload + 4

// blockPayloadHeader starts the dump.
const blockPayloadHeader = "[Slack Block Kit payload for this message]\n```json\n"

// Keys the dump keeps: scalars copied as they are, containers reduced
// again (_BLOCK_SCALAR_KEYS, _BLOCK_RECURSIVE_KEYS).
var (
	blockScalarKeys = map[string]bool{"type": true, "block_id": true, "action_id": true, "style": true,
		"dispatch_action": true, "optional": true, "multiple": true, "emoji": true}
	blockRecursiveKeys = map[string]bool{"text": true, "title": true, "description": true, "label": true,
		"placeholder": true, "accessory": true, "fields": true, "elements": true, "options": true,
		"option_groups": true, "confirm": true, "submit": true, "close": true, "hint": true}
)

// jsonValue is a decoded JSON value that keeps an object's key order.
type jsonValue struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	str  string
	num  json.Number
	b    bool
	keys []string // object: in first-seen order (a repeated key keeps its place, takes the last value)
	vals []*jsonValue
	// index is an object's position of each key in keys.
	index map[string]int
}

// decodeOrdered decodes one JSON value keeping object key order.
func decodeOrdered(raw []byte) (*jsonValue, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return readValue(d)
}

func readValue(d *json.Decoder) (*jsonValue, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			v := &jsonValue{kind: 'a'}
			for d.More() {
				item, err := readValue(d)
				if err != nil {
					return nil, err
				}
				v.vals = append(v.vals, item)
			}
			_, err := d.Token()
			return v, err
		}
		v := &jsonValue{kind: 'o'}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			key, _ := kt.(string)
			item, err := readValue(d)
			if err != nil {
				return nil, err
			}
			v.set(key, item)
		}
		_, err := d.Token()
		return v, err
	case string:
		return &jsonValue{kind: 's', str: t}, nil
	case json.Number:
		return &jsonValue{kind: 'n', num: t}, nil
	case bool:
		return &jsonValue{kind: 'b', b: t}, nil
	}
	return &jsonValue{kind: 'z'}, nil
}

// set puts key in an object, as a Python dict assignment does.
func (v *jsonValue) set(key string, item *jsonValue) {
	if i, ok := v.index[key]; ok {
		v.vals[i] = item
		return
	}
	if v.index == nil {
		v.index = map[string]int{}
	}
	v.index[key] = len(v.keys)
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, item)
}

// get returns an object's value of key.
func (v *jsonValue) get(key string) *jsonValue {
	if i, ok := v.index[key]; ok {
		return v.vals[i]
	}
	return nil
}

// empty reports whether Python counts v among (None, {}, [], ""), the
// values the dump leaves out.
func (v *jsonValue) empty() bool {
	switch v.kind {
	case 'z':
		return true
	case 's':
		return v.str == ""
	case 'o':
		return len(v.keys) == 0
	case 'a':
		return len(v.vals) == 0
	}
	return false
}

// truthy reports whether Python counts v as true.
func (v *jsonValue) truthy() bool {
	switch v.kind {
	case 'b':
		return v.b
	case 'n':
		f, err := v.num.Float64()
		return err != nil || f != 0
	}
	return !v.empty()
}

// sanitize is _sanitize: lists lose their empty items, objects keep the
// allowlisted keys.
func (v *jsonValue) sanitize() *jsonValue {
	switch v.kind {
	case 'a':
		out := &jsonValue{kind: 'a'}
		for _, item := range v.vals {
			if s := item.sanitize(); !s.empty() {
				out.vals = append(out.vals, s)
			}
		}
		return out
	case 'o':
		out := &jsonValue{kind: 'o'}
		for i, k := range v.keys {
			switch {
			case blockScalarKeys[k]:
				out.set(k, v.vals[i])
			case blockRecursiveKeys[k]:
				if s := v.vals[i].sanitize(); !s.empty() {
					out.set(k, s)
				}
			}
		}
		return out
	}
	return v
}

// blockPayload is the dump of a message's blocks (raw JSON), "" when none
// of them is to be dumped.
func blockPayload(raw json.RawMessage) string {
	all, err := decodeOrdered(raw)
	if err != nil || all.kind != 'a' {
		return ""
	}
	inspectable := &jsonValue{kind: 'a'}
	for _, block := range all.vals {
		switch {
		case block.kind == 'o':
			if t := block.get("type"); t != nil && t.kind == 's' && (t.str == "rich_text" || t.str == "table") {
				continue
			}
		case block.truthy():
			continue // not a block at all
		}
		inspectable.vals = append(inspectable.vals, block)
	}
	if len(inspectable.vals) == 0 {
		return ""
	}
	var b strings.Builder
	writePython(&b, inspectable.sanitize(), 0)
	payload := b.String()
	if utf8.RuneCountInString(payload) > maxBlockPayload {
		payload = strings.TrimRightFunc(string([]rune(payload)[:maxBlockPayload-18]), pytext.IsSpace) + "\n... [truncated]"
	}
	return blockPayloadHeader + payload + "\n```"
}

// writePython writes v as Python's json.dumps(v, indent=2,
// ensure_ascii=False) does, at nesting depth, until b holds maxDumpBytes.
func writePython(b *strings.Builder, v *jsonValue, depth int) {
	// container writes n items between open and close, one a line.
	container := func(open, close string, n int, item func(i int)) {
		if n == 0 {
			b.WriteString(open + close)
			return
		}
		b.WriteString(open)
		for i := range n {
			if b.Len() > maxDumpBytes {
				return
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n" + strings.Repeat("  ", depth+1))
			item(i)
		}
		if b.Len() <= maxDumpBytes {
			b.WriteString("\n" + strings.Repeat("  ", depth) + close)
		}
	}
	switch v.kind {
	case 'o':
		container("{", "}", len(v.keys), func(i int) {
			writePythonString(b, v.keys[i])
			b.WriteString(": ")
			writePython(b, v.vals[i], depth+1)
		})
	case 'a':
		container("[", "]", len(v.vals), func(i int) { writePython(b, v.vals[i], depth+1) })
	case 's':
		writePythonString(b, v.str)
	case 'n':
		b.WriteString(pythonNumber(v.num))
	case 'b':
		b.WriteString(strconv.FormatBool(v.b))
	default:
		b.WriteString("null")
	}
}

// writePythonString writes s as a JSON string the way Python's json
// module does with ensure_ascii=False: only the quote, the backslash and
// the control characters are escaped.
func writePythonString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte("0123456789abcdef"[r>>4])
				b.WriteByte("0123456789abcdef"[r&0xf])
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pythonNumber is how Python writes a JSON number it read: an integer as
// its digits (zero without a sign), any other number as the float's repr
// (shortest digits; exponent form below 1e-4 and from 1e16;
// Infinity past the float's range).
func pythonNumber(n json.Number) string {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		if strings.Trim(strings.TrimPrefix(s, "-"), "0") == "" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case err != nil:
		return s
	}
	exp := 0
	if f != 0 {
		e := strconv.FormatFloat(f, 'e', -1, 64)
		exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	}
	if exp < -4 || exp >= 16 {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	out := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(out, ".") {
		out += ".0"
	}
	return out
}
