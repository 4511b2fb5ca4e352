package nexscope

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// drainInBackground reads c until its connection ends, counting frames.
func drainInBackground(c *client, frames *atomic.Int64) {
	go func() {
		for {
			if _, _, err := c.WS.Read(context.Background()); err != nil {
				return
			}
			frames.Add(1)
		}
	}()
}

// BenchmarkMsgAck measures msg -> ack round trips in a room of 50 members
// (the default cap): the sender waits for each ack before the next msg.
// p50/p99 are reported per round trip.
func BenchmarkMsgAck(b *testing.B) {
	for _, mode := range []string{"direct", "broadcast"} {
		b.Run(mode+"/50members", func(b *testing.B) {
			tr := startRelay(b, Config{})
			var got atomic.Int64
			for i := range DefaultMaxUsers - 1 {
				c := tr.join(b, "", "m"+strconv.Itoa(i))
				drainInBackground(c, &got)
			}
			sender := tr.join(b, "", "sender")
			to := `["m7"]`
			if mode == "broadcast" {
				to = `[]`
			}
			frame := []byte(`{"type":"msg","msgId":"01HQX5C9ABCDEFGHJKMNPQRSTV","from":"sender","to":` + to +
				`,"role":"userAgent","threadId":"t-2026-04-28-xyz","text":"please refactor auth.ts, write tests first","hopCount":0,"attachments":[]}`)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := sender.WS.Write(ctx, websocket.MessageText, frame); err != nil {
					b.Fatal(err)
				}
				for {
					_, resp, err := sender.WS.Read(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if len(resp) > 12 && string(resp[:12]) == `{"type":"ack` {
						break
					}
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

const benchFileSize = 32 << 20

// isFileEnd reports whether a relay text frame is a file-end.
func isFileEnd(frame []byte) bool {
	m, err := decodeFrame(frame)
	return err == nil && m["type"] == "file-end"
}

// BenchmarkFileRelay streams a file through the relay to 1 and 10
// recipients; MB/s counts the file's bytes once (not once per recipient).
// Compare with BenchmarkLoopbackCopy for the ratio.
func BenchmarkFileRelay(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("recipients=%d", n), func(b *testing.B) {
			tr := startRelay(b, Config{})
			to := make([]string, n)
			ends := make(chan struct{}, n)
			for i := range n {
				to[i] = "r" + strconv.Itoa(i)
				c := tr.join(b, "", to[i])
				go func() {
					for {
						typ, rd, err := c.WS.Reader(context.Background())
						if err != nil {
							return
						}
						if typ == websocket.MessageBinary {
							_, _ = io.Copy(io.Discard, rd)
							continue
						}
						msg, _ := io.ReadAll(rd)
						if isFileEnd(msg) {
							ends <- struct{}{}
						}
					}
				}()
			}
			sender := tr.join(b, "", "sender")
			src := newChunkSource(benchFileSize, 64<<10)
			var chunks [][]byte
			for c := src.Next(); c != nil; c = src.Next() {
				chunks = append(chunks, slices.Clone(c))
			}
			b.SetBytes(benchFileSize)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				id := "f" + strconv.Itoa(i)
				sender.SendJSON(fileStart(id, "sender", to, benchFileSize))
				for _, c := range chunks {
					if err := sender.WS.Write(context.Background(), websocket.MessageBinary, c); err != nil {
						b.Fatal(err)
					}
				}
				sender.SendJSON(fileEnd(id, "sender"))
				sender.Expect("ack")
				for range n {
					<-ends
				}
			}
		})
	}
}

// BenchmarkLoopbackCopy is the baseline: the same bytes in the same 64 KiB
// writes over a bare loopback TCP connection.
func BenchmarkLoopbackCopy(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	received := make(chan int64)
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			var total int64
			for total < benchFileSize {
				n, err := io.CopyN(io.Discard, conn, benchFileSize-total)
				total += n
				if err != nil {
					return
				}
			}
			received <- total
		}
	})
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	src := newChunkSource(benchFileSize, 64<<10)
	var chunks [][]byte
	for c := src.Next(); c != nil; c = src.Next() {
		chunks = append(chunks, slices.Clone(c))
	}
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	for range b.N {
		for _, c := range chunks {
			if _, err := conn.Write(c); err != nil {
				b.Fatal(err)
			}
		}
		<-received
	}
	b.StopTimer()
	conn.Close()
	wg.Wait()
}

// BenchmarkSlowRecipientMemory sends a 100 MiB file to a fast and a slow
// recipient (the slow one pauses 100 µs after every frame). The clients and
// the sender allocate nothing per chunk, so the Go heap in use above its
// level before the transfer (peak-heap-MiB, sampled every 5 ms) is the
// relay's own buffering; peak-slow-queue-KiB is the slow recipient's send
// queue at its fullest and peak-rss-MiB the whole test process's resident
// set (/proc/self/status VmRSS, Linux only; relay and clients together).
func BenchmarkSlowRecipientMemory(b *testing.B) {
	const size = 100 << 20
	tr := startRelay(b, Config{})
	ends := make(chan struct{}, 2)
	read := func(c *client, pause time.Duration) {
		buf := make([]byte, 128<<10)
		for {
			typ, rd, err := c.WS.Reader(context.Background())
			if err != nil {
				return
			}
			n, _ := io.ReadFull(rd, buf)
			if n == len(buf) {
				_, _ = io.CopyBuffer(io.Discard, rd, buf)
			}
			if pause > 0 {
				time.Sleep(pause) // the slow reader being simulated, not synchronization
			}
			if typ == websocket.MessageText && isFileEnd(buf[:n]) {
				ends <- struct{}{}
			}
		}
	}
	go read(tr.join(b, "", "fast"), 0)
	go read(tr.join(b, "", "slow"), 100*time.Microsecond)
	sender := tr.join(b, "", "sender")
	slow := tr.member("slow")
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		var peakHeap, peakQueue, peakRSS atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > base {
					storeMax(&peakHeap, ms.HeapInuse-base)
				}
				storeMax(&peakQueue, uint64(slow.q.Queued()))
				storeMax(&peakRSS, rssBytes())
			}
		}()
		id := "f" + strconv.Itoa(i)
		sender.SendJSON(fileStart(id, "sender", []string{"fast", "slow"}, size))
		src := newChunkSource(size, 64<<10)
		for c := src.Next(); c != nil; c = src.Next() {
			if err := sender.WS.Write(context.Background(), websocket.MessageBinary, c); err != nil {
				b.Fatal(err)
			}
		}
		sender.SendJSON(fileEnd(id, "sender"))
		sender.Expect("ack")
		<-ends
		<-ends
		close(stop)
		<-sampled
		b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(peakQueue.Load())/(1<<10), "peak-slow-queue-KiB")
		b.ReportMetric(float64(peakRSS.Load())/(1<<20), "peak-rss-MiB")
	}
}

func storeMax(p *atomic.Uint64, v uint64) {
	if v > p.Load() {
		p.Store(v)
	}
}

// rssBytes reads VmRSS from /proc/self/status (0 where there is none).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkEdgeAnswers: an edge member with a file-start and 50,000 msgs
// unanswered by the home (its window holds that many small ones) takes the
// msgs' acks, oldest first, as the home sends them (the file-start's comes
// at its file-end); reported per ack.
func BenchmarkEdgeAnswers(b *testing.B) {
	const outstanding = 50000
	acks := make([][]byte, outstanding)
	ids := make([][]byte, outstanding)
	for i := range acks {
		ids[i] = []byte(`"m` + strconv.Itoa(i) + `"`)
		acks[i] = appendAck(nil, ids[i], []byte(`"t"`), nil, nil)
	}
	var l edgeLink
	b.ResetTimer()
	for i := range b.N {
		if i%outstanding == 0 {
			b.StopTimer()
			l.pending.sent = append(append(l.pending.sent[:0], []byte(`"file"`)), ids...)
			b.StartTimer()
		}
		l.relayed(acks[i%outstanding])
	}
}
