package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"connector/session"
)

// eventOutcomes map a platform name to the function that turns one raw
// fixture payload (plus the cached context a native adapter would consult)
// into what the platform's live ingest makes of it: a turn (its Source and
// event fields) or a drop.
var eventOutcomes = map[string]func(raw, context json.RawMessage) (session.Outcome, error){}

// conformanceCmd checks the connector against the oracle fixtures produced
// by running the gateway's real Python code.
func conformanceCmd(args []string, stdout, stderr io.Writer) int {
	const synopsis = "connector conformance keys|events FILE"
	const about = "Checks the connector against an oracle fixture made by running the gateway's real Python code:\n" +
		"  keys FILE     session_keys.json: source and options in, session key out\n" +
		"  events FILE   platform_events.json: a raw platform payload through its platform's normalizer\n" +
		"Exits 0 when every case passes, 1 when one fails, 2 when the fixture cannot be read or holds no case."
	kind := ""
	if len(args) > 0 && (args[0] == "keys" || args[0] == "events") {
		kind, args = args[0], args[1:]
	}
	fs := newFlagSet("conformance", synopsis, about)
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if kind == "" || fs.NArg() != 1 {
		fmt.Fprintf(stderr, "usage: %s\n", synopsis)
		return 2
	}
	path := fs.Arg(0)
	var failures []string
	var total int
	var err error
	if kind == "keys" {
		total, failures, err = checkKeys(path)
	} else {
		total, failures, err = checkEvents(path)
	}
	if err == nil && total == 0 { // checks nothing: no pass
		err = errors.New("the fixture holds no case")
	}
	if err != nil {
		fmt.Fprintf(stderr, "connector conformance: %s: %v\n", path, err)
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
func checkKeys(path string) (int, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
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
// platform payload through its platform's normalizer; every key of the
// expected source must match, and the session key (gateway defaults) too.
func checkEvents(path string) (int, []string, error) {
	results, err := session.CheckOutcomes(path, "", func(c session.EventCase) (session.Outcome, error) {
		outcome, ok := eventOutcomes[c.Platform]
		if !ok {
			return session.Outcome{}, fmt.Errorf("platform %q is not implemented by this connector", c.Platform)
		}
		return outcome(c.Raw, c.Context)
	})
	if err != nil {
		return 0, nil, err
	}
	var failures []string
	for _, r := range results {
		if len(r.Diffs) > 0 {
			failures = append(failures, fmt.Sprintf("FAIL %s:\n  %s", r.Name, strings.Join(r.Diffs, "\n  ")))
		}
	}
	return len(results), failures, nil
}
