package telegram

import (
	"maps"
	"sync"
	"time"
)

// limiter enforces Telegram's per-chat limits: at most chatN messages into
// one chat per second and groupN messages into one group per minute, as
// sliding windows, plus the flood wait a 429 imposes on a chat. Slots are
// reserved in call order, so one chat's messages go out in the order they
// were paced. Groups are the chats with negative ids (groups, supergroups
// and channels).
type limiter struct {
	chatN, groupN int // per second, per minute; <= 0 disables the window

	mu    sync.Mutex
	chats map[int64]*chatLimit
	// added counts new chats since the last sweep of idle ones.
	added int
}

type chatLimit struct {
	chat, group window
	last        time.Time // the latest reservation
	blocked     time.Time // a 429's retry_after ends here
}

// window remembers the last n reservation times, oldest at next once full.
type window struct {
	times []time.Time
	next  int
}

// sweepEvery is how many new chats trigger a sweep of idle ones.
const sweepEvery = 4096

func newLimiter(chatPerSecond, groupPerMinute int) *limiter {
	return &limiter{chatN: chatPerSecond, groupN: groupPerMinute, chats: make(map[int64]*chatLimit)}
}

// reserve books the earliest slot for one message into chat at or after
// now. When that slot is after latest it books nothing and reports false
// with the slot it would have been.
func (l *limiter) reserve(chat int64, countGroup bool, now, latest time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := l.get(chat, now)
	at := later(now, later(cl.last, cl.blocked))
	if l.chatN > 0 {
		at = later(at, cl.chat.free(l.chatN, time.Second))
	}
	group := countGroup && chat < 0 && l.groupN > 0
	if group {
		at = later(at, cl.group.free(l.groupN, time.Minute))
	}
	if at.After(latest) {
		return at, false
	}
	if l.chatN > 0 {
		cl.chat.add(at, l.chatN)
	}
	if group {
		cl.group.add(at, l.groupN)
	}
	cl.last = at
	return at, true
}

// block holds chat until until (a 429's retry_after).
func (l *limiter) block(chat int64, until, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := l.get(chat, now)
	cl.blocked = later(cl.blocked, until)
}

// blockedUntil returns when chat's flood wait ends (zero if none).
func (l *limiter) blockedUntil(chat int64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cl := l.chats[chat]; cl != nil {
		return cl.blocked
	}
	return time.Time{}
}

// get returns chat's state, creating it (and now and then dropping idle
// chats so the map stays bounded by the active ones). Called with l.mu held.
func (l *limiter) get(chat int64, now time.Time) *chatLimit {
	if cl := l.chats[chat]; cl != nil {
		return cl
	}
	if l.added++; l.added >= sweepEvery {
		l.added = 0
		idle := now.Add(-time.Minute) // the longer window
		maps.DeleteFunc(l.chats, func(_ int64, cl *chatLimit) bool { return cl.last.Before(idle) && cl.blocked.Before(now) })
	}
	cl := &chatLimit{}
	l.chats[chat] = cl
	return cl
}

// free returns when the window admits one more of n per per.
func (w *window) free(n int, per time.Duration) time.Time {
	if len(w.times) < n {
		return time.Time{}
	}
	return w.times[w.next].Add(per)
}

func (w *window) add(t time.Time, n int) {
	if len(w.times) < n {
		w.times = append(w.times, t)
		return
	}
	w.times[w.next] = t
	w.next = (w.next + 1) % n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
