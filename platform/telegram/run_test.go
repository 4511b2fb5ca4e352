package telegram

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/refusedtest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
)

func TestStartsWhileTelegramIsUnreachable(t *testing.T) {
	url := refusedtest.URL(t)
	e := newEnv(t, func(c *Config) { c.APIServerURL = url })
	if st := e.p.Status(); st.Ready {
		t.Fatalf("ready before Run: %+v", st)
	}
	e.run(t)
	st := e.waitStatus(t, func(st platform.Status) bool { return strings.Contains(st.Detail, "cannot reach") })
	if st.Ready || st.Terminal {
		t.Errorf("status %+v, want not ready and not terminal", st)
	}
	// Egress fails cleanly meanwhile, retryable.
	r := e.act(t, "t1", sendAction("123456789", "hello?"))
	if r.Success || r.Code != contract.CodeUnavailable {
		t.Errorf("send while unreachable: %+v", r)
	}
}

func TestRecoversWhenTelegramComesBack(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("getMe", telegramtest.Failure{Code: 502, Description: "Bad Gateway"})
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return strings.Contains(st.Detail, "Bad Gateway") })
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
}

// The reconnect backoff runs on the platform's clock: after a refused
// getMe, the next try comes once the clock has moved connectBackoffMin.
func TestReconnectBackoffRunsOnTheClock(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, nil)
	e.fake.Fail("getMe", telegramtest.Failure{Code: 502, Description: "Bad Gateway"})
	e.run(t)
	none := func() int { return 0 }
	clk.Settle(t, 1, none, none) // the connect loop sleeps on the clock
	clk.Advance(connectBackoffMin)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	calls := e.calls(t, "getMe", 2)
	if gap := calls[1].At.Sub(calls[0].At); gap != connectBackoffMin {
		t.Errorf("retried %v after the refusal, want %v", gap, connectBackoffMin)
	}
}

// A refused delivery is retried on the platform's clock, after 50 ms and
// then 100 ms, holding the poll meanwhile.
func TestRedeliveryBackoffRunsOnTheClock(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, nil)
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	e.sink.Refuse(2)
	first := fixture(t, "telegram_shared_private_text")
	e.fake.Enqueue(first.Raw)
	none := func() int { return 0 }
	for _, backoff := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		clk.Settle(t, 1, none, none) // refused: the poll sleeps on the clock
		if next, _ := clk.Next(); next.Sub(clk.Now()) != backoff {
			t.Fatalf("retry due in %v, want %v", next.Sub(clk.Now()), backoff)
		}
		clk.Advance(backoff)
	}
	if d := e.sink.Next(t); d.SessionKey != first.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, first.Key)
	}
}

func TestRejectedTokenIsTerminal(t *testing.T) {
	other := telegramtest.New(t, "7012345678:ANOTHER-token") // knows another token
	e := newEnv(t, func(c *Config) { c.APIServerURL = other.URL })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := e.p.Run(ctx, e.sink)
	if !errors.Is(err, errTokenRejected) {
		t.Fatalf("Run = %v, want the token rejection", err)
	}
	if st := e.p.Status(); !st.Terminal || st.Ready {
		t.Errorf("status %+v, want terminal", st)
	}
}

func TestPollingTokenRevokedEndsRun(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("getUpdates", telegramtest.Failure{Code: 401, Description: "Unauthorized"})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.p.Run(ctx, e.sink); !errors.Is(err, errTokenRejected) {
		t.Fatalf("Run = %v, want the token rejection", err)
	}
	if st := e.p.Status(); !st.Terminal {
		t.Errorf("status %+v, want terminal", st)
	}
}

func TestPollingConflictReportedThenRecovers(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("getUpdates", telegramtest.Failure{Code: 409, Description: "Conflict: terminated by other getUpdates request"})
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return strings.Contains(st.Detail, "conflicts") && !st.Ready })
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
}

func TestRunTwice(t *testing.T) {
	e := pollingEnv(t, nil)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.p.Run(ctx, e.sink); err == nil {
		t.Error("a second concurrent Run was accepted")
	}
}
