package cluster

// SetRoomyHook makes n run f in Roomy once Roomy found the outbox at least
// half full, before it decides; set before n's first Roomy.
func SetRoomyHook(n *Node, f func()) { n.roomyHook = f }
