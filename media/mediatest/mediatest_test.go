package mediatest

import (
	"runtime"
	"testing"
	"time"
)

// TestHeapPeakSeesAHeldBuffer: a 16 MiB buffer alive when Stop samples
// counts in the peak, so a transfer holding its file whole would be seen.
func TestHeapPeakSeesAHeldBuffer(t *testing.T) {
	peak := StartHeapPeak(time.Hour) // only the first and the last sample
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	got := peak.Stop()
	runtime.KeepAlive(buf)
	// Heap that was in use at the baseline may be freed by the collection
	// the allocation triggers, so the peak above it can fall a little short
	// of the buffer; without the buffer it would be about 0.
	if got < 15<<20 {
		t.Fatalf("peak %s above baseline with 16 MiB held", MiB(got))
	}
}
