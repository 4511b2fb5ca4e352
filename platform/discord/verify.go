package discord

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"strconv"
	"time"
)

// Interaction request headers.
const (
	headerSignature = "X-Signature-Ed25519"
	headerTimestamp = "X-Signature-Timestamp"
)

// verifySignature checks Discord's Ed25519 signature over timestamp + raw
// body (what discordgo.VerifyInteraction does, on a body we already read
// under a size limit) and that the timestamp is within skew of now. scratch
// holds the signed message.
func verifySignature(pub ed25519.PublicKey, sigHex, ts string, body []byte, now time.Time, skew time.Duration, scratch *bytes.Buffer) bool {
	if len(sigHex) != 2*ed25519.SignatureSize || ts == "" || len(ts) > 20 {
		return false
	}
	var sig [ed25519.SignatureSize]byte
	if _, err := hex.Decode(sig[:], []byte(sigHex)); err != nil {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(sec, 0)); d > skew || d < -skew {
		return false
	}
	scratch.Reset()
	scratch.WriteString(ts)
	scratch.Write(body)
	return ed25519.Verify(pub, scratch.Bytes(), sig[:])
}
