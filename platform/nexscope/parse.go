package nexscope

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// clientFrame is one text frame from a member, parsed without copying: each
// field is the raw JSON text of the top-level member of that exact,
// case-sensitive name, or nil when absent. Of duplicate names the last wins,
// as in the JavaScript and Python readers on the other end, so what the relay
// checks is what recipients read. (encoding/json matches names without regard
// to case, which would let {"from":"bob","From":"alice"} pass as alice.)
type clientFrame struct {
	raw                                        []byte
	typ, msgID, from, to, threadID, role, text []byte
	hopCount, attachment                       []byte
	code                                       []byte // of the error frames a room's home sends (unanswered.go)
}

// Parse errors; both are answered with bad_json.
var (
	errNotJSON   = errors.New("text frame is not valid UTF-8 JSON")
	errNotObject = errors.New("text frame is not a JSON object")
)

// parseFrame parses a member's text frame.
func parseFrame(data []byte) (clientFrame, error) {
	f := clientFrame{raw: data}
	if !utf8.Valid(data) || !json.Valid(data) {
		return f, errNotJSON
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return f, errNotObject
	}
	fields := [...]struct {
		name string
		val  *[]byte
	}{{"type", &f.typ}, {"msgId", &f.msgID}, {"from", &f.from}, {"to", &f.to}, {"threadId", &f.threadID},
		{"role", &f.role}, {"text", &f.text}, {"hopCount", &f.hopCount}, {"attachment", &f.attachment}, {"code", &f.code}}
	eachMember(data, i, func(key, val []byte) {
		for _, fl := range fields {
			if keyIs(key, fl.name) {
				*fl.val = val
				return
			}
		}
	})
	return f, nil
}

// eachMember calls fn with the raw key (quotes included) and raw value of
// every member of the object starting at data[i], or with a nil key and
// every raw element of the array starting there. data must be valid JSON;
// an i at or past its end calls fn for nothing.
func eachMember(data []byte, i int, fn func(key, val []byte)) {
	object := i < len(data) && data[i] == '{'
	for i = skipSpace(data, i+1); i < len(data) && data[i] != '}' && data[i] != ']'; {
		var key []byte
		if object {
			kEnd := skipString(data, i)
			key, i = data[i:kEnd], skipSpace(data, skipSpace(data, kEnd)+1) // past ':'
		}
		vEnd := skipValue(data, i)
		fn(key, data[i:vEnd])
		i = skipSpace(data, vEnd)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at data[i].
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// skipValue returns the index after the value starting at data[i].
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
			i++
		}
		return i
	}
}

// keyIs reports whether the raw JSON string key decodes to name.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return len(key) == len(name)+2 && string(key[1:len(key)-1]) == name
	}
	s, ok := jsonString(key)
	return ok && s == name
}

// stringValue returns the contents of a raw JSON string without copying when
// it has no escapes and is valid UTF-8; otherwise it decodes it as
// encoding/json does (each invalid byte becomes U+FFFD). ok is false when raw
// is not a string.
func stringValue(raw []byte) (s []byte, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw[1 : len(raw)-1], true
	}
	str, ok := jsonString(raw)
	return []byte(str), ok
}

// jsonString decodes a raw JSON string (escapes included).
func jsonString(raw []byte) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// namesOf calls fn with the raw form and the decoded value of every element
// of the JSON array raw; ok is false when raw is not an array of strings.
func namesOf(raw []byte, fn func(raw, name []byte)) (ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	ok = true
	eachMember(raw, 0, func(_, v []byte) {
		if !ok {
			return
		}
		name, isStr := stringValue(v)
		if !isStr {
			ok = false
			return
		}
		fn(v, name)
	})
	return ok
}

// intValue reads a raw JSON number that is a non-negative integer.
func intValue(raw []byte) (int64, bool) {
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err == nil {
		return n, true
	}
	// 1e3 or 12.0 spell integers too.
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != float64(int64(f)) || f > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// objectMember returns the raw value of the member key (the last of duplicates)
// of the JSON object raw; nil when raw is not an object or has none.
func objectMember(raw []byte, key string) []byte {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	var val []byte
	eachMember(raw, i, func(k, v []byte) {
		if keyIs(k, key) {
			val = v
		}
	})
	return val
}

// attachmentSize reads attachment.size from a file-start's raw attachment.
func attachmentSize(raw []byte) (int64, bool) { return intValue(objectMember(raw, "size")) }

// attachmentText reads a string member of an attachment object.
func attachmentText(attachment []byte, key string) string {
	s, _ := optionalString(objectMember(attachment, key))
	return s
}
