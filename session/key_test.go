package session_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"connector/session"
)

// keyCase is one case of testdata/session_keys.json, produced by running the
// gateway's real build_session_key().
type keyCase struct {
	Name    string          `json:"name"`
	Source  json.RawMessage `json:"source"`
	Options session.Options `json:"options"`
	Key     string          `json:"key"`
}

func loadKeyCases(t testing.TB) []keyCase {
	t.Helper()
	data, err := os.ReadFile("testdata/session_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []keyCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestKeyFixtures(t *testing.T) {
	cases := loadKeyCases(t)
	if len(cases) != 254 {
		t.Fatalf("fixture has %d cases, want 254", len(cases))
	}
	for _, c := range cases {
		var src session.Source
		if err := json.Unmarshal(c.Source, &src); err != nil {
			t.Errorf("%s: decode source: %v", c.Name, err)
			continue
		}
		if got := session.Key(&src, c.Options); got != c.Key {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, got, c.Key)
		}
	}
}

// TestSourceRoundTrip checks that every non-wire fixture source re-encodes to
// the same dict (to_dict layout) apart from the connector's added keys.
func TestSourceRoundTrip(t *testing.T) {
	for _, c := range loadKeyCases(t) {
		if strings.HasPrefix(c.Name, "wire_") {
			continue
		}
		var src session.Source
		if err := json.Unmarshal(c.Source, &src); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		out, _ := json.Marshal(src)
		var want, got []orderedKV
		want = orderedKeys(t, c.Source)
		got = orderedKeys(t, out)
		got = dropKeys(got, "is_bot", "message_is_edit")
		if len(want) != len(got) {
			t.Errorf("%s: keys\n got %v\nwant %v", c.Name, got, want)
			continue
		}
		for i := range want {
			if want[i] != got[i] {
				t.Errorf("%s: key %d\n got %v\nwant %v", c.Name, i, got[i], want[i])
			}
		}
	}
}

// A nexscope source is keyed the way the gateway reads it: the stock gateway
// knows no platform "nexscope" and keys it as "relay" (hermes-wire.md §6.2);
// a gateway with a nexscope plugin keys it as "nexscope". Other platforms
// are never renamed.
func TestNexscopeKeyPlatform(t *testing.T) {
	src := session.Source{Platform: "nexscope", ChatID: "lab", ChatType: "group",
		UserID: session.Str("alice"), ThreadID: session.Str("t-1")}
	group := session.Source{Platform: "nexscope", ChatID: "lab", ChatType: "group", UserID: session.Str("alice")}
	plugin := session.DefaultOptions
	plugin.NexscopeKeyPlatform = "nexscope"
	relay := session.DefaultOptions
	relay.NexscopeKeyPlatform = "relay"
	discord := session.Source{Platform: "discord", ChatID: "c1", ChatType: "group", UserID: session.Str("u1")}
	for _, c := range []struct {
		name string
		src  *session.Source
		opts session.Options
		want string
	}{
		{"stock gateway, thread", &src, session.DefaultOptions, "agent:main:relay:group:lab:t-1"},
		{"stock gateway, no thread", &group, session.DefaultOptions, "agent:main:relay:group:lab:alice"},
		{"relay spelled out", &src, relay, "agent:main:relay:group:lab:t-1"},
		{"nexscope plugin", &src, plugin, "agent:main:nexscope:group:lab:t-1"},
		{"other platforms unchanged", &discord, plugin, "agent:main:discord:group:c1:u1"},
	} {
		if got := session.Key(c.src, c.opts); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	if src.Platform != "nexscope" {
		t.Fatalf("Key changed the source's platform to %q", src.Platform)
	}
}

type orderedKV struct{ K, V string }

func orderedKeys(t *testing.T, data []byte) []orderedKV {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var kv []orderedKV
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		kv = append(kv, orderedKV{k.(string), string(v)})
	}
	return kv
}

func dropKeys(kv []orderedKV, keys ...string) []orderedKV {
	out := kv[:0]
next:
	for _, e := range kv {
		for _, k := range keys {
			if e.K == k {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

func BenchmarkKey(b *testing.B) {
	src := session.Source{Platform: "discord", ChatID: "1310000000000000001", ChatType: "group",
		UserID: session.Str("1310000000000000101"), ScopeID: "1310000000000000500"}
	b.ReportAllocs()
	for b.Loop() {
		_ = session.Key(&src, session.DefaultOptions)
	}
}

func BenchmarkSourceAppendJSON(b *testing.B) {
	src := session.Source{Platform: "discord", ChatID: "1310000000000000001", ChatType: "thread",
		ChatName: session.Str("Guild / #general / plan"), UserID: session.Str("1310000000000000101"),
		UserName: session.Str("Ada"), ThreadID: session.Str("1310000000000000001"),
		ScopeID: "1310000000000000500", ParentChatID: "1310000000000000002", MessageID: "1310000000000000700"}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = src.AppendJSON(buf[:0])
	}
}
