package discord

import (
	"connector/platform/chatcontext"
	"connector/session"
)

// Channel context (supports_context, the contract's "Model B"): a guild
// message of an admitted author that only the mention gates held back
// (not_mentioned, mentions_others) is kept, from the MESSAGE_CREATE the
// Gateway already delivered, as context of its channel (or thread) for the
// tenant that owns the guild. The next message of that channel delivered
// to the tenant carries the kept messages, oldest first, as its context
// (an auto-threaded one too: the chatter came before its thread), and a
// delivery the relay took forgets them. No message costs a REST call;
// edits, DMs, bots' messages and channels the tenant's policy excludes are
// never kept, nor anything of a tenant whose channel_context is off. Memory is bounded by package chatcontext (per channel the
// latest 20 messages within 32 KiB, 1,024 channels) and per instance.

// attachContext sets the messages kept for ct (as created: the vault's
// vault.Creation, which the registry's apply updates first, so a tenant
// made again under its id never gets the earlier one's) in channel as t's
// context and reports whether there were any. A DM or an interrupt
// carries none.
func (p *Platform) attachContext(ct chatcontext.Tenant, channel string, t *turn) bool {
	if t.interrupt || t.ev.Source.ChatType == session.ChatTypeDM {
		return false
	}
	t.ev.Context = p.channelContext.Pending(ct, channel)
	return len(t.ev.Context) > 0
}
