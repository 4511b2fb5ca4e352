package fairshare

import "github.com/hashicorp/golang-lru/v2/simplelru"

// LRU keeps values by key, at most n in all, each held by a tenant and
// shared by weight (Holdings): a key new to a full LRU forgets the least
// recently used key of the tenant holding the most for its weight, so a
// tenant's keys within its share never go for another's, and a lone
// tenant may keep all n. Its zero value is not usable; call NewLRU. It is
// not safe for concurrent use.
type LRU[K comparable, V any] struct {
	n        int
	holder   map[K]string                    // the tenant holding each key
	byTenant map[string]*simplelru.LRU[K, V] // a tenant's keys, by use
	shares   *Holdings                       // the keys of each tenant
}

// NewLRU returns an empty LRU of n (> 0) keys shared by weights (nil:
// each tenant weighs 1).
func NewLRU[K comparable, V any](n int, weights map[string]int) *LRU[K, V] {
	return &LRU[K, V]{n: n, holder: make(map[K]string), byTenant: make(map[string]*simplelru.LRU[K, V]), shares: NewHoldings(weights)}
}

// Get returns k's value, and marks it used.
func (l *LRU[K, V]) Get(k K) (V, bool) {
	if tenant, ok := l.holder[k]; ok {
		return l.byTenant[tenant].Get(k)
	}
	var zero V
	return zero, false
}

// Peek returns k's value, not marking it used.
func (l *LRU[K, V]) Peek(k K) (V, bool) {
	if tenant, ok := l.holder[k]; ok {
		return l.byTenant[tenant].Peek(k)
	}
	var zero V
	return zero, false
}

// Add sets k to v, marked used, held by tenant (moved to it when another
// held it); a key new to a full LRU first forgets the least recently used
// key of the tenant holding the most for its weight.
func (l *LRU[K, V]) Add(tenant string, k K, v V) {
	if was, ok := l.holder[k]; ok && was != tenant {
		l.Remove(k)
	}
	keys := l.byTenant[tenant]
	if _, ok := l.holder[k]; !ok {
		if len(l.holder) >= l.n {
			oldest, _, _ := l.byTenant[l.shares.Fullest()].GetOldest()
			l.Remove(oldest)
		}
		if keys = l.byTenant[tenant]; keys == nil {
			keys, _ = simplelru.NewLRU[K, V](l.n, nil) // n > 0: cannot fail
			l.byTenant[tenant] = keys
		}
		l.holder[k] = tenant
		l.shares.Add(tenant, 1)
	}
	keys.Add(k, v)
}

// Remove forgets k.
func (l *LRU[K, V]) Remove(k K) {
	tenant, ok := l.holder[k]
	if !ok {
		return
	}
	keys := l.byTenant[tenant]
	keys.Remove(k)
	delete(l.holder, k)
	l.shares.Add(tenant, -1)
	if keys.Len() == 0 {
		delete(l.byTenant, tenant)
	}
}

// Keys returns the keys each tenant holds, the least recently used first.
func (l *LRU[K, V]) Keys() map[string][]K {
	all := make(map[string][]K, len(l.byTenant))
	for tenant, keys := range l.byTenant {
		all[tenant] = keys.Keys()
	}
	return all
}

// Len is the number of keys kept, of every tenant.
func (l *LRU[K, V]) Len() int { return len(l.holder) }
