//go:build race

package relay

// raceDetector is set when the tests run under the race detector, whose
// instrumentation grows every goroutine's stack and whose sync.Pool drops
// some of what it is given.
const raceDetector = true
