package cluster

// SetRoomyHook makes n run f in Roomy once Roomy found the outbox holding
// at least half a TenantShare, before it decides; set before n's first
// Roomy.
func SetRoomyHook(n *Node, f func()) { n.roomyHook = f }

// Encode returns a message of type typ from instance from carrying fields,
// as Send publishes it.
func Encode(typ byte, from string, fields ...[]byte) []byte {
	return encode(typ, from, nil, fields)
}
