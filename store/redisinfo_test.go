package store

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
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
