package fairshare

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
