// Package wsconn is the connection core of the connector's WebSocket
// servers (relay's gateway connections, nexscope's members): a byte-bounded
// send queue whose writer goroutine runs only while there is something to
// write, a write watchdog, a close that first flushes or drops what is
// queued, and a jittered keepalive that costs no goroutine while it waits.
// Its owners decide what a close means (their close values) and what an
// overflowing queue costs the peer; wsconn only runs the mechanism.
//
// Its locks are leaves (docs/locks.md): an owner's may be held while calling
// Queue and Keepalive methods, and Writer methods and Keepalive's timeout
// callback run with none of wsconn's held.
package wsconn

import "connector/contract"

// Close is contract.Close: how an owner ends a connection.
type Close = contract.Close

// Drop is not sent: it drops the socket without a close handshake (the peer
// is gone, or a write to it is stuck).
var Drop = Close{Code: -1}
