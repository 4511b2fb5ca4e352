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
// produced from them.
type EventCase struct {
	Name     string          `json:"name"`
	Platform string          `json:"platform"`
	Raw      json.RawMessage `json:"raw"`
	Context  json.RawMessage `json:"context"`
	Source   json.RawMessage `json:"source"`
	Key      string          `json:"key"`
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
	cases, err := LoadEventCases(path, platform)
	if err != nil {
		return nil, err
	}
	out := make([]EventResult, len(cases))
	for i, c := range cases {
		out[i].Name = c.Name
		src, err := normalize(c)
		if err != nil {
			out[i].Diffs = []string{"normalize: " + err.Error()}
			continue
		}
		if out[i].Diffs, err = Mismatches(&src, c.Source, c.Key); err != nil {
			out[i].Diffs = []string{err.Error()}
		}
	}
	return out, nil
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
