package main

import (
	"strings"
	"testing"
)

// TestConfigTypeErrorsNameTheKeyAndTheFix: a value of the wrong kind is
// reported with its key path, its line and how to write it.
func TestConfigTypeErrorsNameTheKeyAndTheFix(t *testing.T) {
	for doc, want := range map[string][]string{
		"shutdown_grace: 30\n":                                                        {"shutdown_grace (line 1)", "write a duration such as 30s"},
		"listen: 127.0.0.1:0\nrelay:\n  ack_window: lots\n":                           {"relay.ack_window (line 3)", `"lots" is not a whole number`},
		"relay: {ping_interval: 1.5}\n":                                               {"relay.ping_interval (line 1)", "write a duration such as 1.5s"},
		"relay: {clock_skew: soon}\n":                                                 {"relay.clock_skew (line 1)", `"soon" is not a duration`},
		"tenants:\n  - id: t1\n    gateways:\n      - id: gw1\n        secrets: s1\n": {"tenants[0].gateways[0].secrets (line 5)", "where a list belongs"},
		"tenants:\n  - id: t1\n    session:\n      group_sessions_per_user: maybe\n":  {"tenants[0].session.group_sessions_per_user (line 4)", "write true or false"},
		"log: [debug]\n":                        {"log (line 1)", "where a section of keys belongs"},
		"http: {max_header_bytes: 64k}\n":       {"http.max_header_bytes (line 1)", "not a whole number"},
		"listen: 127.0.0.1:0\nlisten_typo: x\n": {`unknown key "listen_typo" (line 2)`},
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil {
			t.Errorf("%q: accepted", doc)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", doc, err, w)
			}
		}
		if strings.Contains(err.Error(), "cannot unmarshal") {
			t.Errorf("%q: error %q still reads as yaml's", doc, err)
		}
	}
}
