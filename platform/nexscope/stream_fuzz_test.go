package nexscope

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"testing/iotest"
	"time"

	"connector/internal/cluster"
	"connector/internal/redistest"
)

// FuzzStreamInput feeds arbitrary bytes to what reads another instance's
// stream before and after its hello: the hello line and the length-framed
// messages. Neither may panic, read a line past maxHello, nor take a
// message longer than its limit.
func FuzzStreamInput(f *testing.F) {
	f.Add([]byte(streamHello + " i1 00112233445566778899aabbccddeeff\n\x03t\x01x"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := bytes.NewReader(data)
		br := bufio.NewReader(rd)
		if line, err := readLine(br, maxHello); err == nil {
			if len(line) > maxHello {
				t.Fatalf("hello of %d bytes read", len(line))
			}
			if from, secret, ok := parseHello(line); ok && (from == "" || len(secret) != 16) {
				t.Fatalf("hello %q parsed as %q, %x", line, from, secret)
			}
		}
		const limit = 1 << 10
		for {
			msg, _, err := readStreamMessage(br, rd, limit)
			if err != nil {
				return
			}
			if len(msg) == 0 || len(msg) > limit {
				t.Fatalf("message of %d bytes taken", len(msg))
			}
		}
	})
}

// TestStreamRefusedWithoutTicket: a connection to an instance's stream
// listener that presents no ticket the instance gave is closed unread.
func TestStreamRefusedWithoutTicket(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL)
	s := in.p.cluster.streams
	waitFor(t, "the stream listener", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.addr != ""
	})
	for _, hello := range []string{
		streamHello + " i1 00112233445566778899aabbccddeeff\n",
		"GET / HTTP/1.1\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(testTimeout))
		if _, err := conn.Write([]byte(hello)); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("hello %q: read %d bytes, %v; want the connection closed", hello, n, err)
		}
		_ = conn.Close()
	}
}

// readStreamMessage reads messages small and large, split anywhere between
// what its bufio.Reader holds and what it reads past it, whole and in order;
// the large ones into pooled chunks.
func TestReadStreamMessageLargeAndSmall(t *testing.T) {
	var stream []byte
	var want [][]byte
	for i, n := range []int{3, 5000, 70000, 1, 9000, 4096, 200} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		msg[n-1] = '!'
		want = append(want, msg)
		stream = binary.AppendUvarint(stream, uint64(n))
		stream = append(stream, msg...)
	}
	rd := bytes.NewReader(stream)
	br := bufio.NewReaderSize(rd, 4096)
	for i, w := range want {
		got, held, err := readStreamMessage(br, rd, 1<<20)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if (held != nil) != (len(w) >= cluster.RefBytes) || held != nil && (&held.buf[0] != &got[0] || held.refs.Load() != 0) {
			t.Fatalf("message %d of %d bytes: held %v; want a pooled chunk, unreferenced, from %d bytes", i, len(w), held != nil, cluster.RefBytes)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("message %d: %d bytes read differ from the %d written", i, len(got), len(w))
		}
	}
	if _, _, err := readStreamMessage(br, rd, 1<<20); err != io.EOF {
		t.Fatalf("after the last message: %v, want EOF", err)
	}
}

// readStreamMessage reads a message past maxPooledChunk, whose buffer grows
// as its bytes arrive, whole, and the message behind it intact, with the
// stream delivered in short reads.
func TestReadStreamMessageGrowsAsBytesArrive(t *testing.T) {
	big := make([]byte, 5*maxPooledChunk/2+7)
	for i := range big {
		big[i] = byte(i * 7)
	}
	stream := binary.AppendUvarint(nil, uint64(len(big)))
	stream = append(stream, big...)
	stream = binary.AppendUvarint(stream, 3)
	stream = append(stream, "end"...)
	rd := iotest.HalfReader(bytes.NewReader(stream))
	br := bufio.NewReaderSize(rd, 4096)
	got, held, err := readStreamMessage(br, rd, 8*maxPooledChunk)
	if err != nil || held == nil || !bytes.Equal(got, big) || &held.buf[0] != &got[0] {
		t.Fatalf("large message: %d bytes, held %v, %v; want the %d written, in its chunk", len(got), held != nil, err, len(big))
	}
	if got, _, err := readStreamMessage(br, rd, 8*maxPooledChunk); err != nil || string(got) != "end" {
		t.Fatalf("message behind it: %q, %v", got, err)
	}
}
