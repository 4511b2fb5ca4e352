package relay

import (
	"context"
	"errors"
	"slices"
	"sync"

	"connector/contract"
)

// errReplaced is admit's answer to a newcomer that a newer connection of
// the same gateway id displaced while it waited.
var errReplaced = errors.New("replaced by a newer connection of the same gateway id")

// refusedTooManyConns is the Metrics.Refused reason of a newcomer refused
// with 4409.
const refusedTooManyConns = "too_many_connections"

// refusedNoCredentials is the Metrics.Refused reason of an upgrade without
// an Authorization header, answered 401.
const refusedNoCredentials = "no_credentials"

// admission enforces Config.MaxConnsPerGateway for one gateway id. A
// connection holds a slot from before its upgrade until its socket is fully
// closed, so at no instant do more connections of the id exist, open or
// closing, than the limit.
//
// The newest connections win. A newcomer beyond the limit marks the oldest
// connection not already leaving as evicted (it is closed with 4409) and
// waits for a slot; slots go to the waiting newcomers in arrival order. When
// even the waiting newcomers are beyond the limit, the oldest of them is
// refused with 4409. So the connections holding or waiting for a slot,
// evicted ones aside, never outnumber the limit, and the last ones to
// arrive are the ones that stay.
type admission struct {
	limit int

	mu      sync.Mutex
	held    []*slot // admitted and not yet released, oldest first
	waiting []*slot // newcomers waiting for a slot, oldest first
}

// slot is one connection's place in its gateway id's admission.
type slot struct {
	ready    chan struct{} // closed once admitted or displaced
	admitted bool          // set before ready is closed
	evicted  bool          // told to leave: a newer connection needs the slot
	conn     *conn         // the connection on the slot, once attached
}

func newAdmission(limit int) *admission { return &admission{limit: limit} }

// admit returns a slot for a new connection, waiting while the gateway id
// has limit connections. It fails with errReplaced when a newer connection
// displaced this one, or with ctx's error when ctx ends first.
func (a *admission) admit(ctx context.Context) (*slot, error) {
	s, leaving := a.arrive()
	if leaving != nil {
		leaving.closeWith(contract.EndTooManyConns)
	}
	return a.wait(ctx, s)
}

// arrive queues a newcomer's slot, admitting it at once if the gateway id
// is below its limit and nobody waits. It returns the connection the
// newcomer evicted, to be closed 4409, if any.
func (a *admission) arrive() (*slot, *conn) {
	s := &slot{ready: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.held) < a.limit && len(a.waiting) == 0 {
		s.admitted = true
		a.held = append(a.held, s)
		close(s.ready)
		return s, nil
	}
	a.waiting = append(a.waiting, s)
	return s, a.makeRoomLocked()
}

// wait waits until s is admitted (nil) or displaced (errReplaced), or ctx
// ends (ctx's error; s is then given up).
func (a *admission) wait(ctx context.Context, s *slot) (*slot, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		if s.admitted {
			a.releaseLocked(s)
		} else {
			a.waiting = slices.DeleteFunc(a.waiting, func(w *slot) bool { return w == s })
		}
		return nil, ctx.Err()
	}
	if !s.admitted {
		return nil, errReplaced
	}
	return s, nil
}

// makeRoomLocked brings the connections that stay (held and not evicted,
// plus waiting) back to the limit after a newcomer arrived: it evicts the
// oldest held connection not already evicted, or else displaces the oldest
// waiting newcomer. It returns the connection to close, if any.
func (a *admission) makeRoomLocked() *conn {
	staying := len(a.waiting)
	var oldest *slot
	for _, h := range a.held {
		if !h.evicted {
			staying++
			if oldest == nil {
				oldest = h
			}
		}
	}
	if staying <= a.limit {
		return nil
	}
	if oldest != nil {
		oldest.evicted = true
		return oldest.conn // nil while upgrading: attach tells it to leave
	}
	w := a.waiting[0]
	a.waiting = a.waiting[1:]
	close(w.ready)
	return nil
}

// attach records c as the connection on s; false when s was evicted while
// c was upgrading, and c must close with 4409 instead of serving.
func (a *admission) attach(s *slot, c *conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.conn = c
	return !s.evicted
}

// release frees s once its connection is fully closed, admitting the
// oldest waiting newcomer.
func (a *admission) release(s *slot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked(s)
}

func (a *admission) releaseLocked(s *slot) {
	a.held = slices.DeleteFunc(a.held, func(h *slot) bool { return h == s })
	for len(a.held) < a.limit && len(a.waiting) > 0 {
		w := a.waiting[0]
		a.waiting = a.waiting[1:]
		w.admitted = true
		a.held = append(a.held, w)
		close(w.ready)
	}
}
