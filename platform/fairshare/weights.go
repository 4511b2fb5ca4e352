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
