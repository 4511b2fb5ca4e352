// Package wsconn is the connection core of the connector's WebSocket
// servers (relay's gateway connections, nexscope's members): a byte-bounded
// send queue whose writer goroutine runs only while there is something to
// write, a write watchdog, a close that first flushes or drops what is
// queued, and a jittered keepalive that costs no goroutine while it waits.
// Its owners decide what a close means (their close values) and what an
// overflowing queue costs the peer; wsconn only runs the mechanism.
//
// Lock order: an owner's locks may be held while calling Queue and
// Keepalive methods; their own locks are leaves (nothing is called under
// them). Writer methods run on the writer goroutine with no wsconn lock
// held; Keepalive's timeout callback runs with none held either.
package wsconn

import "connector/contract"

// Close is contract.Close: how an owner ends a connection.
type Close = contract.Close

// Drop is not sent: it drops the socket without a close handshake (the peer
// is gone, or a write to it is stuck).
var Drop = Close{Code: -1}
