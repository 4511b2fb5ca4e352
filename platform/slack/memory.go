package slack

import (
	lru "github.com/hashicorp/golang-lru/v2"
)

// memory is what this instance remembers of the workspaces' threads, as
// the native adapter's _processed_message_ts, _bot_message_ts,
// _mentioned_threads and its sessions do: bounded (the native caps,
// 5,000 each), least recently used forgotten first. It is per instance:
// on another instance the bot-posted and mentioned markers are absent,
// and the wake check falls back to the thread's root, read from Slack
// (gate.go), which holds everywhere. Keys are "<team>:<ts>".
type memory struct {
	turns     *lru.Cache[string, struct{}] // messages that started a turn
	posted    *lru.Cache[string, struct{}] // messages the bot posted, and their threads
	mentions  *lru.Cache[string, struct{}] // threads mentioned earlier
	delivered *lru.Cache[string, struct{}] // threads with a delivered turn ("<team>:<channel>:<ts>")
}

// memorySize bounds each of memory's sets.
const memorySize = 5000

var _ threadState = (*memory)(nil)

func newMemory() *memory {
	mk := func() *lru.Cache[string, struct{}] {
		c, _ := lru.New[string, struct{}](memorySize) // size > 0: cannot fail
		return c
	}
	return &memory{turns: mk(), posted: mk(), mentions: mk(), delivered: mk()}
}

func (m *memory) processed(team, ts string) bool { return m.turns.Contains(team + ":" + ts) }
func (m *memory) botPosted(team, ts string) bool { return m.posted.Contains(team + ":" + ts) }
func (m *memory) mentioned(team, ts string) bool { return m.mentions.Contains(team + ":" + ts) }
func (m *memory) active(team, channel, ts string) bool {
	return m.delivered.Contains(team + ":" + channel + ":" + ts)
}
func (m *memory) markMentioned(team, ts string) { m.mentions.Add(team+":"+ts, struct{}{}) }

// turnStarted records a delivered turn: message ts of team in channel,
// in session thread (may be "").
func (m *memory) turnStarted(team, channel, ts, thread string) {
	m.turns.Add(team+":"+ts, struct{}{})
	if thread != "" {
		m.delivered.Add(team+":"+channel+":"+thread, struct{}{})
	}
}

// sent records a message the bot posted, and the thread it went into.
func (m *memory) sent(team, ts, thread string) {
	if ts != "" {
		m.posted.Add(team+":"+ts, struct{}{})
	}
	if thread != "" {
		m.posted.Add(team+":"+thread, struct{}{})
	}
}
