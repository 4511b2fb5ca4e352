// Package clustertest forges and reads cluster messages for tests that
// dispatch, lose or duplicate chosen ones.
package clustertest

import (
	"bytes"

	"connector/internal/cluster"
)

// Encode returns the message of type typ from instance from carrying
// fields, as cluster.Node.Send publishes it.
func Encode(typ byte, from string, fields ...[]byte) []byte {
	var g cluster.Gather
	g.Encode(typ, from, fields...)
	return bytes.Join(g.Done(), nil)
}

// Type is the type of an encoded message, its first byte (0 for an empty
// one).
func Type(msg []byte) byte {
	if len(msg) == 0 {
		return 0
	}
	return msg[0]
}
