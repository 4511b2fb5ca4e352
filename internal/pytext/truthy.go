package pytext

import (
	"bytes"
	"strconv"
)

// Truthy reports whether Python counts a JSON value (raw, as decoded from
// valid JSON) as true: present and not null, false, zero, "", {} or [].
func Truthy(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case 'n', 'f':
		return false
	case 't':
		return true
	case '"':
		return len(raw) > 2
	case '{', '[':
		return len(bytes.TrimSpace(raw[1:len(raw)-1])) > 0
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return err != nil || f != 0
}
