package relay

// What cluster tests need to lose chosen pub/sub messages between
// instances: the channels and each message's type byte (its first).
const (
	ClusterWakeChannel = wakeChannel
	ClusterInboxPrefix = inboxPrefix
	ClusterMsgServe    = msgServe
	ClusterMsgDetach   = msgDetach
	ClusterMsgAck      = msgAck
	ClusterMsgFrame    = msgFrame
)

// ClusterResendBeats is how many beats a remote socket's entry may go
// unacknowledged before the driver forwards it again.
const ClusterResendBeats = resendBeats

// RefusalLinger is how long a refused upgrade's socket waits for the
// client's close frame, on the relay's clock.
const RefusalLinger = refusalLinger
