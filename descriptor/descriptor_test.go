package descriptor

import (
	"encoding/json"
	"slices"
	"testing"
)

// required are the nine keys whose absence kills the gateway's reader.
var required = []string{"contract_version", "platform", "label", "max_message_length",
	"supports_draft_streaming", "supports_edit", "supports_threads", "markdown_dialect", "len_unit"}

func TestDescriptorsCarryEveryRequiredKey(t *testing.T) {
	for _, d := range []Descriptor{
		Discord(nil), Telegram([]string{"send"}), Slack([]string{"send"}), Nexscope([]string{"send", "typing"}, 4096), Merge("relay"),
	} {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range required {
			if _, ok := m[k]; !ok {
				t.Errorf("%s descriptor lacks %s: %s", d.Platform, k, b)
			}
		}
		if _, ok := m["supported_ops"].([]any); !ok {
			t.Errorf("%s: supported_ops must be an array, got %s", d.Platform, b)
		}
		if d.MaxMessageLength <= 0 {
			t.Errorf("%s: max_message_length %d", d.Platform, d.MaxMessageLength)
		}
	}
}

func TestCapabilitiesFollowOps(t *testing.T) {
	d := Discord([]string{"typing", "send", "edit", "send"})
	if !d.SupportsEdit || d.SupportsThreads || !slices.Equal(d.SupportedOps, []string{"edit", "send", "typing"}) {
		t.Fatalf("%+v", d)
	}
	if n := Nexscope([]string{"send"}, 4096); n.SupportsEdit || n.SupportsThreads || n.HasOp("edit") {
		t.Fatalf("nexscope claims edit or threads: %+v", n)
	}
	// Native draft streaming needs the draft op: the gateway uses it only
	// when both are there.
	if tg := Telegram([]string{"send", "draft"}); !tg.SupportsDraftStreaming {
		t.Fatalf("telegram with the draft op does not stream drafts: %+v", tg)
	}
	if d.SupportsDraftStreaming || Telegram([]string{"send"}).SupportsDraftStreaming {
		t.Fatal("a descriptor without the draft op claims draft streaming")
	}
}

func TestMergeIsTheIntersection(t *testing.T) {
	m := Merge("relay",
		Discord([]string{"send", "edit", "typing", "react"}),
		Telegram([]string{"send", "edit", "typing"}),
		Nexscope([]string{"send", "typing"}, 4096))
	if m.Platform != "relay" || m.MaxMessageLength != 2000 || m.SupportsEdit || m.MarkdownDialect != MarkdownPlain ||
		m.LenUnit != LenUTF16 || !slices.Equal(m.SupportedOps, []string{"send", "typing"}) {
		t.Fatalf("%+v", m)
	}
	if e := Merge("relay"); len(e.SupportedOps) != 0 || e.MaxMessageLength != DefaultMaxMessageLength {
		t.Fatalf("empty merge %+v", e)
	}
}
