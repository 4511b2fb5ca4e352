package relay

import (
	"context"
	"maps"
	"slices"
	"time"

	"connector/contract"
	"connector/relay/ledger"
	"connector/store"
)

// MaxOutboundBytes bounds the actions of one connection's ops in flight.
const MaxOutboundBytes = maxOutboundBytes

// MaxSessionKeyBytes is the longest session_key an interrupt may name.
const MaxSessionKeyBytes = maxSessionKeyBytes

// MaxBufferIDBytes is the longest bufferId the relay gives.
const MaxBufferIDBytes = maxBufferIDBytes

// MaxProfileBytes is the longest chat profile remembered.
const MaxProfileBytes = maxProfileBytes

// What cluster tests need to lose chosen pub/sub messages between
// instances: the wake channel and each message's type byte.
const (
	ClusterWakeChannel = wakeChannel
	ClusterMsgServe    = msgServe
	ClusterMsgDetach   = msgDetach
	ClusterMsgAck      = msgAck
	ClusterMsgFrame    = msgFrame
	ClusterMsgWritten  = msgWritten
	ClusterMsgHold     = msgHold
	ClusterMsgRoster   = msgRoster
	ClusterMsgTally    = msgTally
	ClusterMsgAskServe = msgAskServes
	ClusterMsgAskHolds = msgAskHolds
)

// RefusalLinger is how long a refused upgrade's socket waits for the
// client's close frame, on the relay's clock.
const RefusalLinger = refusalLinger

// RaceDetector is set under the race detector.
const RaceDetector = raceDetector

// ClusterFramesSent is, on the instance s that drives tenant, the frames
// its links to sockets on other instances count as sent: what its next
// beat's holds announce.
func ClusterFramesSent(s *Server, tenant string) uint64 {
	h := s.hub(tenant)
	if h == nil || h.fleet == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var n uint64
	for _, p := range h.fleet.peers {
		for _, rs := range p.seats {
			n += rs.frames.Sent()
		}
	}
	return n
}

// ClusterRosterMatched is, on the instance s that drives tenant, when the
// last roster of inst that matched arrived (zero if none did).
func ClusterRosterMatched(s *Server, tenant, inst string) time.Time {
	h := s.hub(tenant)
	if h == nil || h.fleet == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.fleet.peers[inst]; p != nil {
		return p.seen
	}
	return time.Time{}
}

// ClusterRemoteSeats is, on the instance s that drives tenant, how many
// sockets on other instances it keeps.
func ClusterRemoteSeats(s *Server, tenant string) int {
	h := s.hub(tenant)
	if h == nil || h.fleet == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.fleet.peers {
		n += len(p.seats)
	}
	return n
}

// ClusterTenure is, on s, the tenure of tenant's lease it holds while
// driving (nil when it holds none). A tenure ends only on the clock (a
// renewal or its view's end) or by Release, and a beat replaces it only
// once it ended.
func ClusterTenure(s *Server, tenant string) *store.Tenure {
	h := s.hub(tenant)
	if h == nil || h.fleet == nil {
		return nil
	}
	h.fleet.beatMu.Lock()
	defer h.fleet.beatMu.Unlock()
	return h.fleet.tenure
}

// CloseConns closes every gateway connection of s with e, as Shutdown
// (1001) and a newer connection beyond MaxConnsPerGateway (4409) do.
func CloseConns(s *Server, e contract.Close) {
	s.mu.Lock()
	conns := slices.Collect(maps.Values(s.conns))
	s.mu.Unlock()
	for _, c := range conns {
		c.closeWith(e)
	}
}

// RevokeConns revokes every gateway connection of s without closing it,
// as closeWith(EndRevoked) does just before it closes the send queue.
func RevokeConns(s *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.revoke()
	}
}

// Conns is how many gateway connections s holds open.
func Conns(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// A connection's interrupt rate: InterruptBurst at once, then one per
// InterruptEvery.
const (
	InterruptBurst = interruptBurst
	InterruptEvery = interruptEvery
)

// Hubs is how many tenants' hubs s holds.
func Hubs(s *Server) int {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return len(s.tenants)
}

// ClusterSocketQueue is, on s, the frames waiting in the send queue of
// tenant's connections here (not those being written) and the bytes
// queued, being written included, and the frames their links to the
// tenant's driver on another instance received.
func ClusterSocketQueue(s *Server, tenant string) (waiting int, queued int64, received uint64) {
	h := s.hub(tenant)
	if h == nil {
		return 0, 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c, st := range h.seats {
		waiting += c.q.Len()
		queued += c.q.Queued()
		if st.link != nil {
			received += st.link.frames.Received()
		}
	}
	return waiting, queued, received
}

// StopLedgerFlushes stops the goroutine of s's ledger pool, as shutting
// down does: what is acknowledged from then on stays queued for the store
// until a flush of the fleet's (giving a lease up, stopping) or Shutdown's
// writes it, so a test sees whether that flush comes before the lease is
// released.
func StopLedgerFlushes(s *Server) { s.ledgers.Close(context.Background()) }

// LateOutbound returns, for a connection of tenant's here now, a call that
// runs an action as that connection's outbound op does once its goroutine
// gets to it (conn.execute), tagged with platform: a test sees what an op
// read before its connection was revoked does when it runs after.
func LateOutbound(s *Server, tenant, platform string) func(*contract.Action) contract.Result {
	h := s.hub(tenant)
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.seats {
		return func(a *contract.Action) contract.Result {
			return c.execute(context.Background(), outboundTarget{name: platform}, a, &outboundOp{c: c})
		}
	}
	return nil
}

// SetRoomHook makes s run f as the cluster outbox's OnRoom (room again)
// pokes tenant's ledger. Set it before the outbox says no to anyone.
func SetRoomHook(s *Server, f func(tenant string)) { s.fleet.roomHook = f }

// NoteOwner has tenant's fleet on s note, as the ledger's OnOwned hook
// does, that connection conn of this instance owns sessionKey.
func NoteOwner(s *Server, tenant, sessionKey, conn string) {
	s.hub(tenant).fleet.noteOwner(ownerOnly(conn), sessionKey, "chat-"+sessionKey)
}

// OwnerWrites is how many session-owner writes of tenant s has queued or
// is writing.
func OwnerWrites(s *Server, tenant string) int { return int(s.hub(tenant).fleet.ownerWrites.Load()) }

// ownerOnly is a ledger.Consumer that takes nothing: a named owner.
type ownerOnly string

func (c ownerOnly) Offer([]byte) ledger.Offered    { return ledger.Closing }
func (c ownerOnly) Owner() (instance, conn string) { return "i0", string(c) }
