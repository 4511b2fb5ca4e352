package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stats summarize one measured run.
type stats struct {
	Sent     int // events the driver produced
	Received int // events a client read
	Errors   int // failed sends, dropped events, broken connections
	Bytes    int // bytes of the received frames (or messages)
	Elapsed  time.Duration
	P50      time.Duration
	P90      time.Duration
	P99      time.Duration
	Max      time.Duration
}

// Lost is how many sent events never arrived.
func (s stats) Lost() int { return max(0, s.Sent-s.Received) }

// AvgBytes is the mean size of a received frame.
func (s stats) AvgBytes() int {
	if s.Received == 0 {
		return 0
	}
	return s.Bytes / s.Received
}

// PerSecond is the received events per second of Elapsed.
func (s stats) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Received) / s.Elapsed.Seconds()
}

// fields encodes s for the child protocol.
func (s stats) fields() string {
	return fmt.Sprintf("%d %d %d %d %d %d %d %d %d", s.Sent, s.Received, s.Errors, s.Bytes,
		int64(s.Elapsed), int64(s.P50), int64(s.P90), int64(s.P99), int64(s.Max))
}

// parseStats decodes what fields wrote.
func parseStats(f []string) (stats, error) {
	var v [9]int64
	if len(f) != len(v) {
		return stats{}, fmt.Errorf("stats: want %d fields, got %q", len(v), strings.Join(f, " "))
	}
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return stats{}, fmt.Errorf("stats field %d: %w", i, err)
		}
		v[i] = n
	}
	return stats{Sent: int(v[0]), Received: int(v[1]), Errors: int(v[2]), Bytes: int(v[3]), Elapsed: time.Duration(v[4]),
		P50: time.Duration(v[5]), P90: time.Duration(v[6]), P99: time.Duration(v[7]), Max: time.Duration(v[8])}, nil
}

// samplesFields encodes the latencies lat and the error count errs for the
// child protocol.
func samplesFields(errs int, lat []time.Duration) string {
	b := strconv.AppendInt(nil, int64(errs), 10)
	for _, d := range lat {
		b = strconv.AppendInt(append(b, ' '), int64(d), 10)
	}
	return string(b)
}

// parseSamples decodes what samplesFields wrote.
func parseSamples(f []string) ([]time.Duration, int, error) {
	if len(f) < 1 {
		return nil, 0, errors.New("samples: no error count")
	}
	errs, err := strconv.Atoi(f[0])
	if err != nil {
		return nil, 0, fmt.Errorf("samples: %w", err)
	}
	lat := make([]time.Duration, len(f)-1)
	for i, v := range f[1:] {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("samples: %w", err)
		}
		lat[i] = time.Duration(ns)
	}
	return lat, errs, nil
}

// recorder collects latencies from many goroutines.
type recorder struct {
	mu     sync.Mutex
	lat    []time.Duration
	errors int
	bytes  int
}

// add records one received frame of n bytes that took d.
func (r *recorder) add(d time.Duration, n int) {
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.bytes += n
	r.mu.Unlock()
}

func (r *recorder) fail() {
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

// take returns the stats of everything recorded since the last take, and
// starts over.
func (r *recorder) take() stats {
	r.mu.Lock()
	l, errs, n := r.lat, r.errors, r.bytes
	r.lat, r.errors, r.bytes = nil, 0, 0
	r.mu.Unlock()
	s := summarize(l)
	s.Errors, s.Bytes = errs, n
	return s
}

// summarize returns the count and percentiles of the latencies l (sorted
// in place).
func summarize(l []time.Duration) stats {
	s := stats{Received: len(l)}
	if len(l) == 0 {
		return s
	}
	slices.Sort(l)
	at := func(q float64) time.Duration { return l[min(len(l)-1, int(q*float64(len(l))))] }
	s.P50, s.P90, s.P99, s.Max = at(0.50), at(0.90), at(0.99), l[len(l)-1]
	return s
}

// count returns how many latencies and errors were recorded since the last
// take, leaving them.
func (r *recorder) count() (n, errors int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat), r.errors
}

// takeSamples returns every latency and the errors recorded since the last
// take, and starts over.
func (r *recorder) takeSamples() ([]time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, errs := r.lat, r.errors
	r.lat, r.errors, r.bytes = nil, 0, 0
	return l, errs
}

// stampPrefix starts the stamp every generated event text carries:
// "rb=<unix ns of the scheduled send> …".
const stampPrefix = "rb="

// appendStamp appends the stamp for t.
func appendStamp(dst []byte, t time.Time) []byte {
	return strconv.AppendInt(append(dst, stampPrefix...), t.UnixNano(), 10)
}

// parseStamp finds the stamp in text and returns its time.
func parseStamp(text []byte) (time.Time, bool) {
	i := bytes.Index(text, []byte(stampPrefix))
	if i < 0 {
		return time.Time{}, false
	}
	rest := text[i+len(stampPrefix):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	ns, err := strconv.ParseInt(string(rest[:n]), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
