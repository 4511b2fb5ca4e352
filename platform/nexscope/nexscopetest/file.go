package nexscopetest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/coder/websocket"
)

// FileStart is a member's file-start frame announcing size bytes of auth.ts.
func FileStart(id, from string, to []string, size int64) map[string]any {
	return map[string]any{
		"type": "file-start", "msgId": id, "from": from, "to": to, "role": "userAgent",
		"threadId": "t-files", "text": "attached: current auth.ts", "hopCount": 0,
		"attachment": map[string]any{"name": "auth.ts", "size": size, "mime": "text/x-typescript", "chunkSize": 65536},
	}
}

// FileEnd is a member's file-end frame.
func FileEnd(id, from string) map[string]any {
	return map[string]any{"type": "file-end", "msgId": id, "from": from}
}

// ChunkSource yields size bytes in chunks of chunkSize; every chunk is
// distinct (its index is stamped in), so reordering changes the hash.
type ChunkSource struct {
	block     []byte
	size, off int64
	chunkSize int
	index     uint64
}

// NewChunkSource returns the source of size bytes in chunks of chunkSize.
func NewChunkSource(size int64, chunkSize int) *ChunkSource {
	block := make([]byte, chunkSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	return &ChunkSource{block: block, size: size, chunkSize: chunkSize}
}

// Next returns the next chunk (valid until the following call) or nil.
func (s *ChunkSource) Next() []byte {
	if s.off >= s.size {
		return nil
	}
	n := int(min(int64(s.chunkSize), s.size-s.off))
	b := s.block[:n]
	if n >= 8 {
		binary.BigEndian.PutUint64(b, s.index)
	}
	s.index++
	s.off += int64(n)
	return b
}

// SHA256Of returns the hex digest of the whole stream of a ChunkSource.
func SHA256Of(size int64, chunkSize int) string {
	src := NewChunkSource(size, chunkSize)
	h := sha256.New()
	for b := src.Next(); b != nil; b = src.Next() {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Received is what a recipient assembled from one file stream.
type Received struct {
	Start, End map[string]any
	Bytes      int64
	SHA256     string
	Err        error
}

// ReceiveFile reads file-start, binary chunks and file-end in a goroutine.
// It reads each binary message through one reused buffer, so the test's own
// garbage does not count in the heap measured around a transfer.
func ReceiveFile(c *Member) <-chan Received {
	out := make(chan Received, 1)
	go func() {
		var r Received
		defer func() { out <- r }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			typ, rd, err := c.WS.Reader(ctx)
			if err != nil {
				r.Err = err
				return
			}
			if typ == websocket.MessageBinary {
				if r.Start == nil {
					r.Err = errors.New("chunk before file-start")
					return
				}
				n, err := io.CopyBuffer(h, rd, buf)
				if err != nil {
					r.Err = err
					return
				}
				r.Bytes += n
				continue
			}
			b, err := io.ReadAll(rd)
			if err != nil {
				r.Err = err
				return
			}
			if done := r.frame(b, h.Sum); done {
				return
			}
		}
	}()
	return out
}

// ReceiveFileStreaming is ReceiveFile, named for the tests that measure
// the heap around a transfer.
func ReceiveFileStreaming(c *Member) <-chan Received { return ReceiveFile(c) }

// frame takes a text frame of a file stream; it reports whether the stream
// ended (file-end, or an error in r.Err).
func (r *Received) frame(b []byte, sum func([]byte) []byte) bool {
	m, err := DecodeFrame(b)
	if err != nil {
		r.Err = err
		return true
	}
	switch m["type"] {
	case "presence":
	case "file-start":
		r.Start = m
	case "file-end":
		r.End = m
		r.SHA256 = hex.EncodeToString(sum(nil))
		return true
	default:
		r.Err = fmt.Errorf("unexpected frame %s", b)
		return true
	}
	return false
}

// SendFile streams a whole file of size bytes from c in chunks of chunkSize.
func SendFile(c *Member, id string, to []string, size int64, chunkSize int) {
	c.SendJSON(FileStart(id, c.Name, to, size))
	src := NewChunkSource(size, chunkSize)
	for b := src.Next(); b != nil; b = src.Next() {
		c.SendBinary(b)
	}
	c.SendJSON(FileEnd(id, c.Name))
}
