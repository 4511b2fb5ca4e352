package relay

// What cluster tests need to lose chosen pub/sub messages between
// instances: the wake channel and each message's type byte.
const (
	ClusterWakeChannel = wakeChannel
	ClusterMsgServe    = msgServe
	ClusterMsgDetach   = msgDetach
	ClusterMsgAck      = msgAck
	ClusterMsgFrame    = msgFrame
)

// RefusalLinger is how long a refused upgrade's socket waits for the
// client's close frame, on the relay's clock.
const RefusalLinger = refusalLinger

// RaceDetector is set under the race detector.
const RaceDetector = raceDetector
