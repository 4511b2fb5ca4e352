package nonneg

import (
	"math"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	type section struct {
		Name    string        `yaml:"name"`
		Limit   int           `yaml:"limit"`
		Timeout time.Duration `yaml:"timeout,omitempty"`
		Hops    int           `yaml:"hops"`
		Ratio   float64       `yaml:"ratio"`
		Hidden  int           `yaml:"-"`
		Quiet   time.Duration `yaml:"-"`
	}
	for _, c := range []struct {
		s    section
		want string
	}{
		{section{Limit: 0, Timeout: time.Second, Hops: -1, Ratio: 0.5, Hidden: -1, Quiet: time.Nanosecond}, ""},
		{section{Timeout: time.Millisecond}, ""},
		{section{Limit: -1}, "x.limit: must not be negative"},
		{section{Timeout: -time.Second}, "x.timeout: must not be negative"},
		{section{Timeout: time.Nanosecond}, "x.timeout: 1ns is shorter than 1ms; leave it unset for the default"},
		{section{Ratio: math.NaN()}, "x.ratio: must be a number"},
		{section{Ratio: -1}, "x.ratio: must not be negative"},
	} {
		got := ""
		if err := Check("x.", &c.s, "hops"); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}
