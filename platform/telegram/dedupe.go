package telegram

import "sync"

// recentIDs remembers the last n update_ids, so a redelivered update (a
// webhook retry, a replayed poll) is dropped instead of delivered twice.
type recentIDs struct {
	mu   sync.Mutex
	set  map[int64]struct{}
	ring []int64
	next int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{set: make(map[int64]struct{}, n), ring: make([]int64, 0, n)}
}

// contains reports whether id was added and not yet forgotten.
func (r *recentIDs) contains(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.set[id]
	return ok
}

// add remembers id, forgetting the oldest one once n are remembered.
func (r *recentIDs) add(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[id]; ok {
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
	}
	r.set[id] = struct{}{}
}
