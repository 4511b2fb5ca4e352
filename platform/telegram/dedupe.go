package telegram

import lru "github.com/hashicorp/golang-lru/v2"

// recentIDs remembers the last n update_ids, so a redelivered update (a
// webhook retry, a replayed poll) is dropped instead of delivered twice.
type recentIDs struct{ ids *lru.Cache[int64, struct{}] }

func newRecentIDs(n int) *recentIDs {
	ids, _ := lru.New[int64, struct{}](n) // n > 0 (Validate, WithDefaults): cannot fail
	return &recentIDs{ids: ids}
}

// contains reports whether id was added and not yet forgotten.
func (r *recentIDs) contains(id int64) bool { return r.ids.Contains(id) }

// add remembers id, forgetting the oldest one once n are remembered.
func (r *recentIDs) add(id int64) { r.ids.Add(id, struct{}{}) }
