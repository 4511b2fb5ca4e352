package whatsapp

import (
	"sync"
	"time"
)

// pacer spaces the messages to one user (a business number and a wa_id):
// at most perSecond a second, in the order they were paced, and none while
// the user is held after a rate-limit answer. Holds back off: each
// rate-limit answer in a row doubles the hold (1 s to 64 s); a message
// that goes through resets it. Idle users are forgotten.
type pacer struct {
	gap time.Duration // 0: no spacing

	mu    sync.Mutex
	users map[string]*userPace
	added int
}

type userPace struct {
	next    time.Time // the earliest slot for the next message
	holds   int       // rate-limit answers in a row
	touched time.Time
}

// Backoff bounds of a rate-limit hold.
const (
	holdMin = time.Second
	holdMax = 64 * time.Second
)

// sweepEvery is how many new users trigger forgetting the idle ones.
const sweepEvery = 4096

func newPacer(perSecond int) *pacer {
	p := &pacer{users: make(map[string]*userPace)}
	if perSecond > 0 {
		p.gap = time.Second / time.Duration(perSecond)
	}
	return p
}

// reserve books the earliest slot for one message to user at or after now.
// When that slot is after latest it books nothing and reports false with
// the slot it would have been.
func (p *pacer) reserve(user string, now, latest time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.get(user, now)
	at := now
	if u.next.After(at) {
		at = u.next
	}
	if at.After(latest) {
		return at, false
	}
	u.next = at.Add(p.gap)
	return at, true
}

// hold keeps user's next message back after a rate-limit answer at now,
// for a backoff that doubles with each answer in a row; it returns the
// hold.
func (p *pacer) hold(user string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.get(user, now)
	d := min(holdMin<<min(u.holds, 6), holdMax)
	u.holds++
	if until := now.Add(d); until.After(u.next) {
		u.next = until
	}
	return d
}

// passed resets user's backoff after a message went through.
func (p *pacer) passed(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[user]; u != nil {
		u.holds = 0
	}
}

// get returns user's state, creating it. Called with mu held.
func (p *pacer) get(user string, now time.Time) *userPace {
	u := p.users[user]
	if u == nil {
		if p.added++; p.added >= sweepEvery {
			p.added = 0
			for k, v := range p.users {
				if now.Sub(v.touched) > holdMax && !v.next.After(now) {
					delete(p.users, k)
				}
			}
		}
		u = &userPace{}
		p.users[user] = u
	}
	u.touched = now
	return u
}
