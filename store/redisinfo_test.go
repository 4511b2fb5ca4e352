package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/redistest"
)

// replyError is an error reply of the server, as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"7.0.15", true}, {"6.2.0", true}, {"6.2", true}, {"10.0.0", true},
		{"6.0.16", false}, {"5.0.7", false}, {"6", false}, {"", false}, {"x.y", false},
	} {
		if got := versionAtLeast(c.v, "6.2"); got != c.want {
			t.Errorf("versionAtLeast(%q, 6.2) = %v", c.v, got)
		}
	}
}

func TestNotServing(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{replyError("ERR wrong number of arguments"), false},
		{replyError("NOSCRIPT No matching script"), false},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("ASK 3999 127.0.0.1:6381"), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{io.EOF, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
	} {
		if got := notServing(c.err); got != c.want {
			t.Errorf("notServing(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A server or proxy whose INFO replication names no master_replid: the
// shipped append script, its INFO call answered by such a text, numbers
// appends on (no check, no jump) instead of failing each one.
func TestAppendScriptWithoutMasterReplid(t *testing.T) {
	call := "redis.call('INFO', 'replication')"
	if strings.Count(appendLua, call) != 1 {
		t.Fatalf("appendLua calls %s %d times, want once", call, strings.Count(appendLua, call))
	}
	script := strings.Replace(appendLua, call, `'# Replication\r\nrole:master\r\nconnected_slaves:0\r\n'`, 1)
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	keys := []string{"seq:{t}", "log:{t}", "bytes:{t}", "replid:{t}", "pruned:{t}", "answers:{t}", "oldanswers:{t}"}
	for want := int64(1); want <= 2; want++ {
		got, err := c.Eval(context.Background(), script, keys, strconv.FormatInt(want, 10), 60000, 1, 0, 0, "", "", "", 0, "x", 0).Int64()
		if err != nil || got != want {
			t.Fatalf("append %d without master_replid = %d, %v; want seq %d", want, got, err, want)
		}
	}
}

// TestResendWindowCountsTheSentinelLookup: through Sentinel with TLS, each
// dial may take go-redis's lookup of the primary (within the dial's
// deadline) and then a TLS dial with a deadline of its own, so the resend
// window counts twice the dial timeout per dial. Before, it counted once,
// and an answer could expire before the last resend.
func TestResendWindowCountsTheSentinelLookup(t *testing.T) {
	window := func(tls bool) (time.Duration, *redis.Options) {
		cfg := Config{RedisSentinel: &RedisSentinel{Master: "m", Addrs: []string{"127.0.0.1:1"}, TLS: tls}}
		c, _, _, err := redisClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return resendWindow(c, readTimeoutFor(cfg), tls), c.(*redis.Client).Options()
	}
	plain, o := window(false)
	withTLS, _ := window(true)
	lookups := time.Duration(o.MaxRetries+1) * time.Duration(o.DialerRetries) * o.DialTimeout
	if withTLS-plain != lookups {
		t.Fatalf("resend window through Sentinel with TLS %v, without %v: want %v more (a lookup of up to %v before each of the %d sends' %d dials)",
			withTLS, plain, lookups, o.DialTimeout, o.MaxRetries+1, o.DialerRetries)
	}
}
