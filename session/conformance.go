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
// instead name why the native adapter starts no turn (Drop), and may give
// the MessageEvent fields the inbound event must carry (Event).
type EventCase struct {
	Name     string          `json:"name"`
	Platform string          `json:"platform"`
	Raw      json.RawMessage `json:"raw"`
	Context  json.RawMessage `json:"context"`
	Source   json.RawMessage `json:"source"`
	Key      string          `json:"key"`
	Drop     string          `json:"drop"`
	Event    json.RawMessage `json:"event"`
}

// Outcome is what a platform's normalizer made of one case: the Source of
// the turn it starts and the event's fields, or Drop, why it starts none.
type Outcome struct {
	Source Source
	// Drop is the platform's reason for ingesting nothing; empty when the
	// case starts a turn.
	Drop string
	// Event holds the inbound event's fields; nil when the normalizer does
	// not report them.
	Event *EventFields
}

// EventFields are the MessageEvent fields a fixture's event object names.
type EventFields struct {
	Text             string  `json:"text"`
	MessageType      string  `json:"message_type"`
	MessageID        *string `json:"message_id"`
	ReplyToMessageID *string `json:"reply_to_message_id"`
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

// EventResult is what CheckOutcomes found for one case: no Diffs means it
// passed.
type EventResult struct {
	Name  string
	Diffs []string
}

// CheckOutcomes runs every case of platform (all when "") in the fixture
// at path through normalize. A case with a drop passes when the outcome
// drops too, whatever its reason; any other case passes when the outcome
// starts a turn whose Source and key pass Mismatches and, when the case
// names event fields, whose Event has each of them. A normalize error is
// the case's one difference.
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
		case c.Drop != "" && o.Drop == "":
			out[i].Diffs = []string{fmt.Sprintf("expected a drop (%s), got a turn", c.Drop)}
		case c.Drop != "":
		case o.Drop != "":
			out[i].Diffs = []string{fmt.Sprintf("expected a turn, got a drop (%s)", o.Drop)}
		default:
			if out[i].Diffs, err = Mismatches(&o.Source, c.Source, c.Key); err != nil {
				out[i].Diffs = []string{err.Error()}
				continue
			}
			out[i].Diffs = append(out[i].Diffs, eventMismatches(o.Event, c.Event)...)
		}
	}
	return out, nil
}

// eventMismatches compares got with a fixture's event object: every key it
// names must have the same value. It returns one line per difference.
func eventMismatches(got *EventFields, want json.RawMessage) []string {
	if len(want) == 0 || string(want) == "null" {
		return nil
	}
	if got == nil {
		return []string{"event: the normalizer reports no event fields"}
	}
	var wantMap, gotMap map[string]any
	if err := json.Unmarshal(want, &wantMap); err != nil {
		return []string{"expected event: " + err.Error()}
	}
	raw, _ := json.Marshal(got) // strings only: cannot fail
	_ = json.Unmarshal(raw, &gotMap)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(wantMap)) {
		if g, ok := gotMap[k]; !ok || !reflect.DeepEqual(g, wantMap[k]) {
			out = append(out, fmt.Sprintf("event.%s: expected %s, got %s", k, jsonText(wantMap[k]), jsonText(g)))
		}
	}
	return out
}

// connectorOnly are the keys Source writes that no native adapter does
// and gateways ignore on the wire (hermes-wire.md §6.2, §12).
var connectorOnly = map[string]bool{"is_bot": true, "message_is_edit": true}

// Mismatches compares src with an oracle's SessionSource dict (want, in
// to_dict() layout) and session key. src must carry want's keys with the
// same JSON values and no other key but null ones (a gateway reads null
// and absent alike) and the connectorOnly ones, and Key(src,
// DefaultOptions) must equal wantKey. It returns one line per difference,
// in key order; none means the case passes.
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
	for _, k := range slices.Sorted(maps.Keys(gotMap)) {
		if _, present := wantMap[k]; !present && gotMap[k] != nil && !connectorOnly[k] {
			out = append(out, fmt.Sprintf("source.%s: expected (absent), got %s", k, jsonText(gotMap[k])))
		}
	}
	slices.Sort(out)
	if key := Key(src, DefaultOptions); key != wantKey {
		out = append(out, fmt.Sprintf("key: expected %s, got %s", wantKey, key))
	}
	return out, nil
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
