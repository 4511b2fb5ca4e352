package fairshare

import (
	"container/heap"
	"fmt"
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
	return n * own / (sum + own)
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
