package nexscope

import (
	"encoding/json"
	"testing"
)

// FuzzAttachmentText: a member's file-start attachment (any valid JSON)
// yields the string its key holds, as encoding/json reads it, or "".
func FuzzAttachmentText(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a.txt","size":3,"mime":"text/plain"}`, `{"name":1}`, `{"name":"\u00e9\n"}`, `[]`, `"x"`, `{}`,
		`{"name":"a","name":"b"}`, `{"mime":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		for _, key := range []string{"name", "mime"} {
			got := attachmentText(raw, key)
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil {
				if got != "" {
					t.Fatalf("attachmentText(%s, %s) = %q for a non-object", raw, key, got)
				}
				continue
			}
			var want string
			if v, ok := obj[key]; ok {
				_ = json.Unmarshal(v, &want)
			}
			if got != want {
				t.Fatalf("attachmentText(%s, %s) = %q, want %q", raw, key, got, want)
			}
			_ = kindOf(got)
		}
	})
}
