// Package mediatest helps tests move large media through the connector
// without holding it in memory: deterministic content generated on the
// fly, a gateway's upload and download of /relay/media with its bearer,
// and a sampler of the heap's peak during a transfer.
package mediatest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Content returns a reader of size deterministic pseudo-random bytes for
// seed; every call with the same arguments yields the same bytes.
func Content(seed uint64, size int64) io.Reader {
	return io.LimitReader(&xorshift{state: seed*0x9E3779B97F4A7C15 | 1}, size)
}

// xorshift yields the bytes of a xorshift64 sequence, independent of how
// reads are sized.
type xorshift struct {
	state uint64
	pos   int // bytes of state already yielded, 0..8
}

func (x *xorshift) Read(p []byte) (int, error) {
	for i := range p {
		if x.pos == 8 || x.pos == 0 {
			x.state ^= x.state << 13
			x.state ^= x.state >> 7
			x.state ^= x.state << 17
			x.pos = 0
		}
		p[i] = byte(x.state >> (8 * x.pos))
		x.pos++
	}
	return len(p), nil
}

// SHA256 returns the lowercase hex sha256 of what r yields and its size.
func SHA256(r io.Reader) (string, int64) {
	h := sha256.New()
	n, _ := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n
}

// Upload posts size bytes of r to base+"/relay/media" as the gateway does
// (raw body, Content-Type, X-Media-Filename, bearer token) and returns the
// HTTP status and the answer's id ("" unless 200).
func Upload(t testing.TB, base, token string, r io.Reader, size int64, mimeType, filename string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/relay/media", r)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", mimeType)
	req.Header.Set("X-Media-Filename", filename)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	defer resp.Body.Close()
	var ans struct {
		ID   string `json:"id"`
		Size int64  `json:"size"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || ans.ID == "" || ans.Size != size {
			t.Fatalf("upload answer %+v: %v", ans, err)
		}
	}
	return resp.StatusCode, ans.ID
}

// Download gets url with the bearer token, streaming the body into a hash;
// it returns the status, the body's sha256 and size.
func Download(t testing.TB, url, token string) (status int, sum string, size int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	defer resp.Body.Close()
	sum, size = SHA256(resp.Body)
	return resp.StatusCode, sum, size
}

// HeapPeak samples the heap in use (runtime/metrics: the bytes of heap
// objects plus the unused bytes of their spans, MemStats.HeapInuse) every
// interval from Start until Stop, and reports the peak above the baseline
// taken at Start (after a GC). Reading runtime/metrics does not stop the
// world, so sampling does not slow the transfer it measures.
type HeapPeak struct {
	base, peak uint64
	samples    []metrics.Sample
	stop       chan struct{}
	wg         sync.WaitGroup
}

// heapInUse are the runtime/metrics samples whose sum is the heap in use.
var heapInUse = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

// readHeapInUse reads the heap in use into samples and returns it.
func readHeapInUse(samples []metrics.Sample) uint64 {
	metrics.Read(samples)
	var n uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}

// StartHeapPeak starts sampling.
func StartHeapPeak(interval time.Duration) *HeapPeak {
	samples := make([]metrics.Sample, len(heapInUse))
	for i, name := range heapInUse {
		samples[i].Name = name
	}
	runtime.GC()
	base := readHeapInUse(samples)
	h := &HeapPeak{base: base, peak: base, samples: samples, stop: make(chan struct{})}
	h.wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			h.peak = max(h.peak, readHeapInUse(h.samples))
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	})
	return h
}

// Stop ends sampling, takes a last sample, and returns the peak heap in
// use above the baseline.
func (h *HeapPeak) Stop() uint64 {
	close(h.stop)
	h.wg.Wait()
	h.peak = max(h.peak, readHeapInUse(h.samples))
	if h.peak < h.base {
		return 0
	}
	return h.peak - h.base
}

// MiB formats n bytes in MiB.
func MiB(n uint64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }
