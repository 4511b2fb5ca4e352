package session

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
)

// EventCase is one case of the oracle fixture platform_events.json: a raw
// platform payload, the cached context a native Hermes adapter would
// consult, and the SessionSource dict and session key the real Python code
// produced from them. In platform_events_slack_whatsapp.json a case may
// instead name Drop (the native adapter starts no turn; any drop reason
// passes), and may give Event, the MessageEvent fields the delivered event
// must carry.
type EventCase struct {
	Name     string          `json:"name"`
	Platform string          `json:"platform"`
	Raw      json.RawMessage `json:"raw"`
	Context  json.RawMessage `json:"context"`
	Source   json.RawMessage `json:"source"`
	Key      string          `json:"key"`
	Drop     string          `json:"drop"`
	Event    *EventFields    `json:"event"`
}

// EventFields are the MessageEvent fields a fixture case checks; a nil
// ReplyToMessageID is JSON null (no reply).
type EventFields struct {
	Text             string  `json:"text"`
	MessageType      string  `json:"message_type"`
	MessageID        string  `json:"message_id"`
	ReplyToMessageID *string `json:"reply_to_message_id"`
}

// Outcome is what a platform made of a fixture case: the Source and
// event fields of the event it would deliver, or the reason it dropped the
// payload.
type Outcome struct {
	Source Source
	Event  EventFields
	// Drop is why nothing is delivered; empty when an event is.
	Drop string
}

// LoadEventCases reads a platform_events.json file; with platform set, only
// that platform's cases are returned.
func LoadEventCases(path, platform string) ([]EventCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var all []EventCase
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if platform == "" {
		return all, nil
	}
	return slices.DeleteFunc(all, func(c EventCase) bool { return c.Platform != platform }), nil
}

// EventResult is what CheckEvents found for one case: no Diffs means it
// passed.
type EventResult struct {
	Name  string
	Diffs []string
}

// CheckEvents runs every case of platform (all when "") in the fixture at
// path through normalize and compares each result with Mismatches; a
// normalize error is the case's one difference.
func CheckEvents(path, platform string, normalize func(c EventCase) (Source, error)) ([]EventResult, error) {
	return CheckOutcomes(path, platform, func(c EventCase) (Outcome, error) {
		src, err := normalize(c)
		return Outcome{Source: src}, err
	})
}

// CheckOutcomes runs every case of platform (all when "") in the fixture at
// path through normalize. A case with a drop passes when the outcome is a
// drop; any other case when the outcome is an event whose source passes
// Mismatches and whose event fields equal the case's Event, when it has
// one. A normalize error is the case's one difference.
func CheckOutcomes(path, platform string, normalize func(c EventCase) (Outcome, error)) ([]EventResult, error) {
	cases, err := LoadEventCases(path, platform)
	if err != nil {
		return nil, err
	}
	out := make([]EventResult, len(cases))
	for i, c := range cases {
		out[i].Name = c.Name
		o, err := normalize(c)
		switch {
		case err != nil:
			out[i].Diffs = []string{"normalize: " + err.Error()}
		case c.Drop != "":
			if o.Drop == "" {
				out[i].Diffs = []string{fmt.Sprintf("expected a drop (%s), got an event", c.Drop)}
			}
		case o.Drop != "":
			out[i].Diffs = []string{fmt.Sprintf("expected an event, got a drop (%s)", o.Drop)}
		default:
			if out[i].Diffs, err = Mismatches(&o.Source, c.Source, c.Key); err != nil {
				out[i].Diffs = []string{err.Error()}
			}
			if c.Event != nil {
				out[i].Diffs = append(out[i].Diffs, eventMismatches(&o.Event, c.Event)...)
			}
		}
	}
	return out, nil
}

// eventMismatches returns one line per event field of want that got
// differs in.
func eventMismatches(got, want *EventFields) []string {
	var out []string
	field := func(name, g, w string) {
		if g != w {
			out = append(out, fmt.Sprintf("event.%s: expected %s, got %s", name, jsonText(w), jsonText(g)))
		}
	}
	field("text", got.Text, want.Text)
	field("message_type", got.MessageType, want.MessageType)
	field("message_id", got.MessageID, want.MessageID)
	if g, w := got.ReplyToMessageID, want.ReplyToMessageID; (g == nil) != (w == nil) || g != nil && *g != *w {
		out = append(out, fmt.Sprintf("event.reply_to_message_id: expected %s, got %s", jsonText(w), jsonText(g)))
	}
	return out
}

// Mismatches compares src with an oracle's SessionSource dict (want, in
// to_dict() layout) and session key. Every key present in want must have
// the same JSON value in src (src may carry more keys, such as is_bot), and
// Key(src, DefaultOptions) must equal wantKey. It returns one line per
// difference, in key order; none means the case passes.
func Mismatches(src *Source, want json.RawMessage, wantKey string) ([]string, error) {
	var wantMap, gotMap map[string]any
	if err := json.Unmarshal(want, &wantMap); err != nil {
		return nil, fmt.Errorf("expected source: %w", err)
	}
	if err := json.Unmarshal(src.AppendJSON(nil), &gotMap); err != nil {
		return nil, fmt.Errorf("connector source: %w", err)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(wantMap)) {
		g, present := gotMap[k]
		switch {
		case !present:
			out = append(out, fmt.Sprintf("source.%s: expected %s, got (absent)", k, jsonText(wantMap[k])))
		case !reflect.DeepEqual(g, wantMap[k]):
			out = append(out, fmt.Sprintf("source.%s: expected %s, got %s", k, jsonText(wantMap[k]), jsonText(g)))
		}
	}
	if key := Key(src, DefaultOptions); key != wantKey {
		out = append(out, fmt.Sprintf("key: expected %s, got %s", wantKey, key))
	}
	return out, nil
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
