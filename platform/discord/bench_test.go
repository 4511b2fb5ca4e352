package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
	"connector/vault"
)

// benchPlatform is a running platform (no Gateway) whose cache knows
// guildLab, with interaction processing delivering to sink.
func benchPlatform(b *testing.B, sink platform.Sink) (*Platform, *[]signedInteraction) {
	p, priv := fuzzPlatform(b)
	p.life.sink = sink
	p.vault = vault.NewMemory(vault.Config{MaxEntries: 1 << 20})
	p.cache.putGuild(guildLab, "Lab")
	topic := "General chat"
	p.cache.putChannel(&wireChannel{ID: chanGeneral, Type: 0, GuildID: guildLab, Name: "general", Topic: topic})
	pool := make([]signedInteraction, 4096)
	now := time.Now()
	for i := range pool {
		body := slashBody(strconv.Itoa(1_000_000+i), fmt.Sprintf("token-%d", i), guildLab, chanGeneral)
		r := discordtest.InteractionRequest("http://x/discord/interactions", priv, now, body)
		pool[i] = signedInteraction{body: body, sig: r.Header.Get(headerSignature), ts: r.Header.Get(headerTimestamp)}
	}
	return p, &pool
}

type signedInteraction struct {
	body    []byte
	sig, ts string
}

func (s *signedInteraction) request() *httptestRequest {
	r := httptest.NewRequest("POST", "/discord/interactions", bytesReader(s.body))
	r.Header.Set(headerSignature, s.sig)
	r.Header.Set(headerTimestamp, s.ts)
	return r
}

// BenchmarkInteractionPipeline measures verified interactions per second:
// Ed25519 verification, decode, dedupe, deferred ack, then normalization,
// session key, vault put and delivery (routing to the tenant's sink), on
// all cores.
func BenchmarkInteractionPipeline(b *testing.B) {
	sink := platformtest.NewSink(0)
	p, pool := benchPlatform(b, sink)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			if i%int64(len(*pool)) == 0 {
				p.seen = platform.NewLocalState(maxSeenInteractions, clock.System) // the pool's ids repeat
			}
			w := httptest.NewRecorder()
			p.serveInteractions(w, (*pool)[i%int64(len(*pool))].request())
			if w.Code != 200 && w.Code != 409 {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
	p.work.Wait()
	b.StopTimer()
	b.ReportMetric(float64(sink.Taken())/time.Since(start).Seconds(), "delivered/s")
}

// BenchmarkInteractionAckLatency measures, per interaction, the time from
// the handler receiving the request to the deferred ACK being written (while
// earlier interactions are processed in the background), and reports p50
// and p99.
func BenchmarkInteractionAckLatency(b *testing.B) {
	p, pool := benchPlatform(b, platformtest.NewSink(0))
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(*pool) == 0 {
			p.seen = platform.NewLocalState(maxSeenInteractions, clock.System)
		}
		r := (*pool)[i%len(*pool)].request()
		w := httptest.NewRecorder()
		t0 := time.Now()
		p.serveInteractions(w, r)
		lat = append(lat, time.Since(t0))
	}
	p.work.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkNormalizeGuildMessage measures Gateway ingest of one guild
// message: decode, gates, source, event, session key.
func BenchmarkNormalizeGuildMessage(b *testing.B) {
	p, _ := fuzzPlatform(b)
	p.cache.putGuild(guildLab, "Lab")
	p.cache.putChannel(&wireChannel{ID: threadPlan, Type: 11, GuildID: guildLab, Name: "Deploy plan", ParentID: chanGeneral})
	p.cache.putChannel(&wireChannel{ID: chanGeneral, Type: 0, GuildID: guildLab, Name: "general"})
	bot := "9000"
	p.botID.Store(&bot)
	raw, _ := json.Marshal(msg("7001", threadPlan, guildLab, "how is the deploy going?", true))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var m wireMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
		t, err := p.normalizer("t1").message(ctx, &m, false)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.key("t1", &t.ev.Source)
	}
}

type httptestRequest = http.Request

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
