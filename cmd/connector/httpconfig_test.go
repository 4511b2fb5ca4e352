package main

import (
	"strings"
	"testing"
)

// TestPerSourceShareDefaultsBelowTheTotal: one source address gets at most
// 64 unauthenticated slots, and never all of them unless configured so.
func TestPerSourceShareDefaultsBelowTheTotal(t *testing.T) {
	for _, tc := range []struct{ total, perSource, want int }{
		{1024, 0, 64},
		{128, 0, 64},
		{100, 0, 50},
		{1, 0, 1},
		{1024, 10, 10},
		{100, 500, 100}, // behind a proxy: the whole total
	} {
		c := Config{HTTP: HTTPConfig{MaxUnauthenticatedConns: tc.total, MaxUnauthenticatedConnsPerSource: tc.perSource}}
		c.normalizeHTTP()
		if err := c.validateHTTP(); err != nil {
			t.Fatal(err)
		}
		if got := c.HTTP.MaxUnauthenticatedConnsPerSource; got != tc.want {
			t.Errorf("total %d, per source %d: per source became %d, want %d", tc.total, tc.perSource, got, tc.want)
		}
	}
	c := Config{HTTP: HTTPConfig{MaxUnauthenticatedConnsPerSource: -1}}
	c.normalizeHTTP()
	if err := c.validateHTTP(); err == nil {
		t.Error("a negative per-source share was accepted")
	}
}

// TestMaxHeaderBytesIsBounded: net/http reads max_header_bytes plus 4096
// slop, which near MaxInt overflows; over 1 MiB is refused by key.
func TestMaxHeaderBytesIsBounded(t *testing.T) {
	for n, ok := range map[int]bool{1 << 20: true, 1<<20 + 1: false, 1<<63 - 1: false} {
		c := Config{HTTP: HTTPConfig{MaxHeaderBytes: n}}
		c.normalizeHTTP()
		if err := c.validateHTTP(); (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "http.max_header_bytes") {
			t.Errorf("max_header_bytes %d: validateHTTP() = %v", n, err)
		}
	}
}
