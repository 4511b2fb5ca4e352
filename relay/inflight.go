package relay

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"connector/contract"
)

// noPlatform is the platform label of an outbound op answered before a
// platform was chosen for it (malformed, refused, declined tag).
const noPlatform = "none"

// outboundOp is one outbound op in flight. It is answered exactly once: by
// the op when the platform call returns, or by Shutdown when the grace
// period ends first.
type outboundOp struct {
	c     *conn
	reqID string
	op    string
	start time.Time
	drops uint64 // the hub's drops when the op began (hub.noteProfile)
	// platform is set by execute once the platform is known (nil until
	// then: noPlatform). Atomic: abandonOps reads it on the shutdown's
	// goroutine while the op's own may still be resolving it.
	platform atomic.Pointer[string]
	answered atomic.Bool
}

// platformName is the platform the op runs on, noPlatform before it is
// known.
func (o *outboundOp) platformName() string {
	if p := o.platform.Load(); p != nil {
		return *p
	}
	return noPlatform
}

// finish answers o with r unless it was answered already (by the op, or
// by Shutdown), and reports whether it did.
func (o *outboundOp) finish(r contract.Result) bool {
	if !o.answered.CompareAndSwap(false, true) {
		return false
	}
	o.c.answer(o.reqID, o.platformName(), o.op, r, o.start)
	return true
}

// shutdownResult answers an op still running when the shutdown grace
// ended: retryable, and flagged ambiguous because the platform may have
// applied it.
var shutdownResult = contract.Result{
	Code:      contract.CodeUnavailable,
	Error:     "connector shut down before the op finished; it may have been applied",
	Ambiguous: true,
}

// abandonOps answers every op still in flight with shutdownResult and
// returns how many there were. Their platform calls run on until their own
// deadline; whatever they return is dropped.
func (s *Server) abandonOps() int {
	s.mu.Lock()
	ops := slices.Collect(maps.Keys(s.ops))
	s.mu.Unlock()
	n := 0
	for _, o := range ops {
		if o.finish(shutdownResult) {
			n++
		}
	}
	return n
}
