package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"

	"connector/session"
)

// eventNormalizers map a platform name to the function that turns one raw
// fixture payload (plus the cached context a native adapter would consult)
// into a SessionSource, through the platform's live ingest code.
var eventNormalizers = map[string]func(raw, context json.RawMessage) (session.Source, error){}

// conformanceCmd checks the connector against the oracle fixtures produced
// by running the gateway's real Python code.
func conformanceCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || (args[0] != "keys" && args[0] != "events") {
		fmt.Fprint(stderr, "usage: connector conformance keys|events FILE\n")
		return 2
	}
	data, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "connector conformance: %v\n", err)
		return 2
	}
	var failures []string
	var total int
	if args[0] == "keys" {
		total, failures, err = checkKeys(data)
	} else {
		total, failures, err = checkEvents(data)
	}
	if err != nil {
		fmt.Fprintf(stderr, "connector conformance: %s: %v\n", args[1], err)
		return 2
	}
	for _, f := range failures {
		fmt.Fprintln(stdout, f)
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", total-len(failures), len(failures))
	if len(failures) > 0 {
		return 1
	}
	return 0
}

// checkKeys runs every case of a session_keys.json fixture: source and
// options in, key out.
func checkKeys(data []byte) (int, []string, error) {
	var cases []struct {
		Name    string          `json:"name"`
		Source  json.RawMessage `json:"source"`
		Options session.Options `json:"options"`
		Key     string          `json:"key"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		return 0, nil, err
	}
	var failures []string
	for _, c := range cases {
		var src session.Source
		if err := json.Unmarshal(c.Source, &src); err != nil {
			failures = append(failures, fmt.Sprintf("FAIL %s: source: %v", c.Name, err))
			continue
		}
		if got := session.Key(&src, c.Options); got != c.Key {
			failures = append(failures, fmt.Sprintf("FAIL %s:\n  expected key %s\n  got      key %s", c.Name, c.Key, got))
		}
	}
	return len(cases), failures, nil
}

// checkEvents runs every case of a platform_events.json fixture: a raw
// platform payload through the platform's normalizer; every key of the
// expected source must match, and the session key (gateway defaults) too.
func checkEvents(data []byte) (int, []string, error) {
	var cases []struct {
		Name     string          `json:"name"`
		Platform string          `json:"platform"`
		Raw      json.RawMessage `json:"raw"`
		Context  json.RawMessage `json:"context"`
		Source   json.RawMessage `json:"source"`
		Key      string          `json:"key"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		return 0, nil, err
	}
	var failures []string
	for _, c := range cases {
		if msg := checkEvent(c.Platform, c.Raw, c.Context, c.Source, c.Key); msg != "" {
			failures = append(failures, fmt.Sprintf("FAIL %s:\n%s", c.Name, msg))
		}
	}
	return len(cases), failures, nil
}

// checkEvent returns "" when the case passes, else what differs.
func checkEvent(platform string, raw, context, wantSource json.RawMessage, wantKey string) string {
	normalize, ok := eventNormalizers[platform]
	if !ok {
		return fmt.Sprintf("  platform %q is not implemented by this connector", platform)
	}
	src, err := normalize(raw, context)
	if err != nil {
		return fmt.Sprintf("  normalize: %v", err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(wantSource, &want); err != nil {
		return fmt.Sprintf("  expected source: %v", err)
	}
	gotJSON, _ := json.Marshal(src)
	if err := json.Unmarshal(gotJSON, &got); err != nil {
		return fmt.Sprintf("  connector source: %v", err)
	}
	var msg string
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, present := got[k]
		if !present || !reflect.DeepEqual(g, want[k]) {
			msg += fmt.Sprintf("  source.%s: expected %s, got %s\n", k, jsonText(want[k]), presentText(g, present))
		}
	}
	if key := session.Key(&src, session.DefaultOptions); key != wantKey {
		msg += fmt.Sprintf("  key: expected %s\n       got      %s\n", wantKey, key)
	}
	return msg
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func presentText(v any, present bool) string {
	if !present {
		return "(absent)"
	}
	return jsonText(v)
}
