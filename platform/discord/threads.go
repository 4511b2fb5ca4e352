package discord

import (
	"cmp"
	"context"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
	lru "github.com/hashicorp/golang-lru/v2"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// maxChannelName is Discord's channel (and thread) name limit.
const maxChannelName = 100

// maxCreatedThreads bounds the memory of threads this instance created.
const maxCreatedThreads = 4096

// createdThreads remembers, per instance, the threads the connector created
// (auto-threading and thread_create) with their initial names: later
// inbound from such a thread carries auto_thread_created and
// auto_thread_initial_name, and a rename guarded by
// only_if_connector_created needs the thread to be in it. Another instance
// does not know the thread, so there the markers are simply absent and the
// guarded rename fails safe.
type createdThreads struct {
	names *lru.Cache[string, string] // thread id -> the name the connector gave it
	// fresh holds auto-threads no send went into yet: the first send's
	// result announces the thread (thread_id, auto_thread_name).
	fresh *lru.Cache[string, struct{}]
}

func newCreatedThreads() *createdThreads {
	names, _ := lru.New[string, string](maxCreatedThreads) // only errors on a size <= 0
	fresh, _ := lru.New[string, struct{}](maxCreatedThreads)
	return &createdThreads{names: names, fresh: fresh}
}

// announce returns the initial name of thread id when it is a fresh
// auto-thread, once: the first send into it reports it.
func (c *createdThreads) announce(id string) (string, bool) {
	if !c.fresh.Remove(id) {
		return "", false
	}
	return c.names.Get(id)
}

// actionThreadName checks and cuts a thread_name for Discord.
func actionThreadName(a *contract.Action) (string, bool) {
	name := strings.TrimSpace(a.ThreadName)
	if name == "" || !utf8.ValidString(name) {
		return "", false
	}
	return textsplit.TruncateRunes(name, maxChannelName), true
}

// opThreadCreate starts a public thread under chat_id, from message_id
// when set (an anchored thread), else a channel thread (type 11). The bot
// joins it, and its id is the result's thread_id (and message_id).
func (p *Platform) opThreadCreate(ctx context.Context, _, parent string, a *contract.Action) contract.Result {
	name, ok := actionThreadName(a)
	if !ok {
		return contract.Failed(contract.CodeBadRequest, "thread_create needs a thread_name")
	}
	if ch, ok := p.cache.cachedChannel(parent); ok && ch.isThread() {
		return contract.Failed(contract.CodeBadRequest, "thread_create: chat_id is a thread; name its parent channel")
	}
	if a.MessageID != "" && !isSnowflake(string(a.MessageID)) {
		return contract.Failed(contract.CodeBadRequest, "thread_create: message_id is not a Discord message id")
	}
	id, err := p.startThread(ctx, parent, string(a.MessageID), name)
	if err != nil {
		return p.failed("thread_create", err)
	}
	r := contract.OK(id)
	r.ThreadID = id
	return r
}

// recordThread caches a thread the connector created, with the bot as a
// participant, and remembers its initial name.
func (p *Platform) recordThread(th *wireChannel, parent, name string) {
	th.ParentID = cmp.Or(th.ParentID, parent)
	th.Name = cmp.Or(th.Name, name)
	p.cache.putChannel(th)
	p.cache.join(th.ID)
	p.created.names.Add(th.ID, name)
}

// opThreadRename renames thread message_id (PATCH /channels/{id}). The
// tenant must be one that may act in the thread (platform.AuthorizeCalls,
// the check Execute made of chat_id: a binding, a claim or a grant; its
// calls ask again about the thread, not chat_id, as their turn comes) and the
// thread be chat_id or a thread under it; held by binding or claim, not
// one another tenant made while it held the channel by grant
// (platform.MayChange: its thread_create's answer is marked in the
// channel, or in the thread when started from a message; held by grant, the thread is its creator's alone). A human
// rename wins: with only_if_current_name the thread's current name is read
// first, and with only_if_connector_created the thread must be one this
// instance created and still carry its initial name; otherwise nothing is
// changed and the result is success false with code name_changed.
func (p *Platform) opThreadRename(ctx context.Context, tenant, _ string, a *contract.Action) contract.Result {
	name, ok := actionThreadName(a)
	threadID := string(a.MessageID)
	switch {
	case !ok:
		return contract.Failed(contract.CodeBadRequest, "thread_rename needs a thread_name")
	case !isSnowflake(threadID):
		return contract.Failed(contract.CodeBadRequest, "thread_rename: message_id is not a Discord thread id")
	}
	ctx, hold, r := platform.AuthorizeCalls(ctx, p, tenant, threadID, p.clock)
	if hold == platform.HoldNone {
		return r
	}
	want := a.OnlyIfCurrentName
	if a.OnlyIfConnectorCreated {
		initial, ok := p.created.names.Get(threadID)
		if !ok {
			return contract.Failed(contract.CodeNameChanged, "thread_rename: the thread was not created by the connector; not renamed")
		}
		if want == nil {
			want = &initial
		}
	}
	wire, err := p.fetchChannel(ctx, threadID)
	if err != nil {
		return p.failed("thread_rename", err)
	}
	th := infoFrom(&wire)
	if !th.isThread() || (th.ID != string(a.ChatID) && th.ParentID != string(a.ChatID)) {
		return contract.Failed(contract.CodeBadRequest, "thread_rename: message_id is not a thread of chat_id")
	}
	if hold != platform.HoldGrant {
		// One started from a message is marked in itself (platform.Execute).
		for _, chat := range []string{th.ParentID, threadID} {
			if r, ok := platform.MayChange(ctx, p.spoke, p, hold, chat, threadID, tenant); !ok {
				return r
			}
		}
	}
	if want != nil && th.Name != *want {
		return contract.Failed(contract.CodeNameChanged, "thread_rename: the thread was renamed since; not renamed")
	}
	var out wireChannel
	if err := p.rest(ctx, "PATCH", discordgo.EndpointChannel(threadID), &discordgo.ChannelEdit{Name: name}, &out); err != nil {
		return p.failed("thread_rename", err)
	}
	if out.ID != "" {
		p.cache.putChannel(&out)
	}
	return contract.OK("")
}
