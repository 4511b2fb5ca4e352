package telegram

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-telegram/bot/models"

	"connector/internal/textsplit"
	"connector/platform"
	"connector/platform/platformtest"
)

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// webhookBodies returns n updates from five chats of both tenants (a DM, a
// group, a forum topic, a supergroup, a channel) with distinct update_ids,
// more than the dedupe window holds, so none is a duplicate.
func webhookBodies(b *testing.B, n int) [][]byte {
	t := &testing.T{}
	var raws []string
	var ids []string
	for _, name := range []string{
		"telegram_shared_private_text", "telegram_shared_basic_group", "telegram_shared_forum_topic_reply_to_member",
		"telegram_shared_supergroup", "telegram_shared_channel_post",
	} {
		c := fixture(t, name)
		var head struct {
			ID json.Number `json:"update_id"`
		}
		if err := json.Unmarshal(c.Raw, &head); err != nil {
			b.Fatal(err)
		}
		raws, ids = append(raws, string(c.Raw)), append(ids, `"update_id": `+head.ID.String())
	}
	out := make([][]byte, n)
	for i := range out {
		k := i % len(raws)
		out[i] = []byte(strings.Replace(raws[k], ids[k], `"update_id": `+strconv.Itoa(900000000+i), 1))
	}
	return out
}

func benchPlatform(b *testing.B) (*Platform, *platformtest.Sink) {
	p, err := New(Config{BotToken: testToken, Chats: testChats, WebhookURL: "https://x.example/h", WebhookSecret: testSecret},
		platform.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	sink := platformtest.NewSink(0)
	var s platform.Sink = sink
	p.sink.Store(&s)
	return p, sink
}

// BenchmarkWebhook measures webhook updates through secret check, body
// read, decode, normalize, tenant routing, dedupe and delivery, on one
// goroutine (Serial) and on all cores (Parallel).
func BenchmarkWebhook(b *testing.B) {
	bodies := webhookBodies(b, 16384)
	run := func(b *testing.B, p *Platform, i int, w *discardWriter) {
		req, _ := http.NewRequest(http.MethodPost, WebhookPath, nil)
		req.Header.Set(secretHeader, testSecret)
		req.Body = io.NopCloser(bytes.NewReader(bodies[i%len(bodies)]))
		p.serveWebhook(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
	b.Run("Serial", func(b *testing.B) {
		p, sink := benchPlatform(b)
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			run(b, p, i, w)
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
		if sink.Taken() == 0 {
			b.Fatal("nothing delivered")
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		p, _ := benchPlatform(b)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &discardWriter{h: http.Header{}}
			for pb.Next() {
				run(b, p, int(next.Add(1)), w)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	})
}

// BenchmarkNormalize isolates normalization of a decoded update.
func BenchmarkNormalize(b *testing.B) {
	p, _ := benchPlatform(b)
	var u = decodeOrFail(b, webhookBodies(b, 1)[0])
	m := p.mapping.Load()
	b.ReportAllocs()
	for b.Loop() {
		if _, drop := normalize(u, m); drop != "" {
			b.Fatal(drop)
		}
	}
}

// BenchmarkRenderMarkdownV2 renders a typical 1 KB agent reply.
func BenchmarkRenderMarkdownV2(b *testing.B) {
	reply := strings.Repeat("**Step 1.** Run `go test ./...` then check [the docs](https://go.dev/doc). It's 2+2=4!\n", 12)
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		_ = renderMarkdownV2(reply)
	}
}

// BenchmarkSplitMessage splits a 20,000-character reply.
func BenchmarkSplitMessage(b *testing.B) {
	content := strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing.\n", 400)
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		_ = textsplit.Split(content, splitRules)
	}
}

func decodeOrFail(b testing.TB, body []byte) *models.Update {
	var u models.Update
	if err := decodeUpdate(body, &u); err != nil {
		b.Fatal(err)
	}
	return &u
}
