package platform_test

import (
	"context"
	"strconv"
	"testing"

	"connector/contract"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
	"connector/vault"
)

// BenchmarkSendInABoundChat is Execute's send path in a chat bound to its
// tenant, each send answering a new message, on a vault in memory and on
// the embedded store and on a real redis-server (what a store write per
// message costs there).
func BenchmarkSendInABoundChat(b *testing.B) {
	for _, backend := range []string{store.BackendMemory, store.BackendEmbedded, store.BackendRedis} {
		b.Run(backend, func(b *testing.B) {
			cfg := store.Config{Backend: backend, Path: b.TempDir()}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(b, redistest.Options{}).URL()
			}
			st, err := store.Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			p := &chatsPlatform{owners: map[string]string{"own": "t1"}}
			n := 0
			e := platform.Egress[*chatsPlatform, string]{
				Ops: platform.Ops[*chatsPlatform, string]{
					contract.OpSend: func(*chatsPlatform, context.Context, string, string, *contract.Action) contract.Result {
						n++
						return contract.OK(strconv.Itoa(n))
					},
				},
				Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
				Grants: platform.NewGrants("chats", vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil),
			}
			send := &contract.Action{Op: contract.OpSend, ChatID: "own", Content: "x"}
			b.ReportAllocs()
			for b.Loop() {
				if r := platform.Execute(context.Background(), &e, p, "t1", send); !r.Success {
					b.Fatal(r)
				}
			}
		})
	}
}
