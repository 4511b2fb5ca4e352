package fairshare

import (
	"container/heap"
	"fmt"
	"sync"
)

// MaxWeight is the largest weight a tenant may be given: far beyond any
// share an operator means, and small enough that Share and Holdings never
// overflow multiplying a count by a weight (or summing weights).
const MaxWeight = 1_000_000

// CheckWeight refuses a configured weight outside 0 (the default, 1) to
// MaxWeight; the error starts with the key, "weight".
func CheckWeight(w int) error {
	if w < 0 || w > MaxWeight {
		return fmt.Errorf("weight: %d is not 0 (the default, 1) to %d", w, MaxWeight)
	}
	return nil
}

// WeightsOf is the Config.Weights of tenants' settings, each read by
// weight (a weight under 1 counts as 1).
func WeightsOf[T any](tenants map[string]T, weight func(T) int) map[string]int {
	w := make(map[string]int, len(tenants))
	for tenant, t := range tenants {
		w[tenant] = weight(t)
	}
	return w
}

// Share is tenant's part of n among the tenants of weights and itself,
// each by its weight as the Scheduler reads it (missing or under 1 counts
// as 1): what a bound shared by weight, not a rate, gives the tenant.
func Share(n int, weights map[string]int, tenant string) int {
	sum := 0
	for t, w := range weights {
		if t != tenant {
			sum += max(w, 1)
		}
	}
	own := max(weights[tenant], 1)
	return Part(n, own, sum+own)
}

// Part is a weight own's part of n among weights summing to sum (own's
// included), as Share gives it: for a caller that sums the weights once
// for many tenants.
func Part(n, own, sum int) int { return n * own / sum }

// Admits reports whether a tenant holding own of a bound of n, the
// tenants together holding total, may take one more part, bound being the
// most it may hold with the rest of n empty: it takes at most bound's part
// of what the other tenants leave, so a busy tenant leaves the others room
// however many are busy (two of half each leave a third a quarter).
func Admits(own, total, n, bound int) bool {
	return total < n && own*n < (n-(total-own))*bound
}

// Slots parts n slots of work running at once between tenants: a tenant
// takes at most half of what the others leave (Admits), and one of a
// single slot. A lone tenant too takes half: a slot is taken or refused at
// once, never waited for, and work running cannot be stopped, so only the
// half left free lets a tenant arriving start its work at once rather than
// lose it. Its zero value is not usable; call NewSlots. It is safe for
// concurrent use.
type Slots struct {
	n     int
	mu    sync.Mutex
	held  map[string]int // by tenant
	total int
}

// NewSlots returns n Slots, none taken.
func NewSlots(n int) *Slots { return &Slots{n: n, held: make(map[string]int)} }

// Take takes a slot for tenant, which Give gives back; false when none
// is left to it.
func (s *Slots) Take(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !Admits(s.held[tenant], s.total, s.n, max(s.n/2, 1)) {
		return false
	}
	s.held[tenant]++
	s.total++
	return true
}

// Give gives back a slot tenant took.
func (s *Slots) Give(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.held[tenant]--; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
}

// Holdings counts the parts tenants hold of one bound shared by weight (as
// Share reads weights) and names the tenant holding the most for its
// weight, whose part goes first when the bound is full: a tenant within
// its share never loses it to another's growth, and a lone tenant may take
// the whole bound. Its zero value is not usable; call NewHoldings. It is
// not safe for concurrent use.
type Holdings struct {
	weights  map[string]int
	byTenant map[string]*holding
	heap     holdingHeap
}

// holding is what a tenant holds, with its weight and index in the heap.
type holding struct {
	tenant  string
	n, w, i int
}

// NewHoldings returns Holdings of nothing, shared by weights.
func NewHoldings(weights map[string]int) *Holdings {
	return &Holdings{weights: weights, byTenant: make(map[string]*holding)}
}

// Add changes what tenant holds by n (1 for one part more, -1 for one less).
func (h *Holdings) Add(tenant string, n int) {
	x := h.byTenant[tenant]
	if x == nil {
		x = &holding{tenant: tenant, w: max(h.weights[tenant], 1)}
		h.byTenant[tenant] = x
		heap.Push(&h.heap, x)
	}
	if x.n += n; x.n > 0 {
		heap.Fix(&h.heap, x.i)
		return
	}
	heap.Remove(&h.heap, x.i)
	delete(h.byTenant, tenant)
}

// Fullest is the tenant holding the most parts for its weight; "" when
// none holds any.
func (h *Holdings) Fullest() string {
	if len(h.heap) == 0 {
		return ""
	}
	return h.heap[0].tenant
}

// holdingHeap orders holdings the fullest first (container/heap).
type holdingHeap []*holding

func (s holdingHeap) Len() int           { return len(s) }
func (s holdingHeap) Less(i, j int) bool { return s[i].n*s[j].w > s[j].n*s[i].w }
func (s holdingHeap) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].i, s[j].i = i, j
}
func (s *holdingHeap) Push(x any) {
	x.(*holding).i = len(*s)
	*s = append(*s, x.(*holding))
}
func (s *holdingHeap) Pop() any {
	old := *s
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*s = old[:len(old)-1]
	return x
}
