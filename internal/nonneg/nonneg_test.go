package nonneg

import (
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
	}
	for _, c := range []struct {
		s    section
		want string
	}{
		{section{Limit: 0, Timeout: time.Second, Hops: -1, Ratio: -1, Hidden: -1}, ""},
		{section{Limit: -1}, "x.limit: must not be negative"},
		{section{Timeout: -time.Second}, "x.timeout: must not be negative"},
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

func TestLeast(t *testing.T) {
	type section struct {
		Limit   int           `yaml:"limit"`
		Timeout time.Duration `yaml:"timeout,omitempty"`
		Hidden  time.Duration `yaml:"-"`
	}
	for _, c := range []struct {
		s    section
		want string
	}{
		{section{Limit: 1, Timeout: 0, Hidden: time.Nanosecond}, ""},
		{section{Timeout: time.Millisecond}, ""},
		{section{Timeout: -time.Nanosecond}, ""}, // Check's to refuse
		{section{Timeout: time.Nanosecond}, "x.timeout: 1ns is shorter than 1ms; leave it unset for the default"},
	} {
		got := ""
		if err := Least("x.", &c.s, time.Millisecond); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}
