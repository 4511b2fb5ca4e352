package nexscope

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

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
		br := bufio.NewReader(bytes.NewReader(data))
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
			msg, err := readStreamMessage(br, limit)
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
