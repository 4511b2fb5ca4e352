package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The stats, samples and stamp parsers read the gateway process's answers
// and the text of events that crossed the connector; none may panic on
// anything.
func FuzzParseStats(f *testing.F) {
	f.Add(stats{Sent: 3, Received: 3, Bytes: 1200, Elapsed: time.Second, P50: 1, P90: 2, P99: 3, Max: 4}.fields())
	f.Add("1 2 3")
	f.Add("-1 x 3 4 5 6 7 8 9")
	f.Fuzz(func(t *testing.T, line string) {
		s, err := parseStats(strings.Fields(line))
		if err != nil {
			return
		}
		back, err := parseStats(strings.Fields(s.fields()))
		if err != nil || back != s {
			t.Fatalf("%q: round trip %+v -> %+v, %v", line, s, back, err)
		}
	})
}

func FuzzParseSamples(f *testing.F) {
	f.Add(samplesFields(2, []time.Duration{time.Millisecond, 3 * time.Second}))
	f.Add("")
	f.Add("0 1 x")
	f.Fuzz(func(t *testing.T, line string) {
		lat, errs, err := parseSamples(strings.Fields(line))
		if err != nil {
			return
		}
		back, backErrs, err := parseSamples(strings.Fields(samplesFields(errs, lat)))
		if err != nil || backErrs != errs || !slices.Equal(back, lat) {
			t.Fatalf("%q: round trip %v %d -> %v %d, %v", line, lat, errs, back, backErrs, err)
		}
	})
}

func FuzzParseStamp(f *testing.F) {
	f.Add([]byte("rb=1700000000123456789 hey @bot"))
	f.Add([]byte("/ask prompt:rb=99999999999999999999999"))
	f.Add([]byte("rb=rb=1"))
	f.Fuzz(func(t *testing.T, text []byte) {
		at, ok := parseStamp(text)
		if !ok {
			return
		}
		if again, ok2 := parseStamp(appendStamp(nil, at)); !ok2 || !again.Equal(at) {
			t.Fatalf("%q: stamp %v does not survive a round trip (%v)", text, at, again)
		}
	})
}
