package discord

import (
	"cmp"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/pytext"
	"connector/internal/textsplit"
	"connector/session"
)

// platformName is the platform value on the wire.
const platformName = "discord"

// dropError says why an event produced no delivery; reason is the metrics
// label ("own_message", "not_mentioned", …). seen is set for a guild
// message only the mention gates held back: it is kept as its channel's
// context (channelctx.go).
type dropError struct {
	reason string
	seen   *contract.ContextMessage
}

// Error names the drop reason.
func (e *dropError) Error() string { return "event dropped: " + e.reason }

func drop(reason string) error { return &dropError{reason: reason} }

// Drop reasons of the mention gates: the messages they hold back are kept as
// channel context.
const (
	reasonNotMentioned   = "not_mentioned"
	reasonMentionsOthers = "mentions_others"
)

// dropReason returns the metrics label of err.
func dropReason(err error) string {
	var d *dropError
	if errors.As(err, &d) {
		return d.reason
	}
	return "lookup_failed"
}

// turn is a normalized event: its session source and the event the gateway
// receives (or, for /stop, an interrupt of that session).
type turn struct {
	ev        contract.Event
	interrupt bool
}

// threadStarter creates a thread from a message and returns its id. Live
// ingest calls Discord; the fixture path answers the message id, which is
// the id Discord gives a message-started thread.
type threadStarter func(ctx context.Context, channelID, messageID, name string) (string, error)

// normalizer maps one tenant's Discord events to sessions exactly as the
// native Hermes adapter does (docs/session-key.md §3).
type normalizer struct {
	look        lookup
	botID       string
	pol         *policy
	startThread threadStarter
	// created marks inbound from threads the connector created; nil in
	// tests that build a normalizer by hand.
	created *createdThreads
}

// message normalizes a MESSAGE_CREATE (edit false) or MESSAGE_UPDATE (edit
// true) after the native adapter's gates.
func (n *normalizer) message(ctx context.Context, m *wireMessage, edit bool) (*turn, error) {
	if edit && m.EditedTimestamp == "" {
		// Discord also sends MESSAGE_UPDATE for embed unfurls, often partial.
		return nil, drop("not_an_edit")
	}
	if m.Author == nil || m.ID == "" || m.ChannelID == "" {
		return nil, drop("malformed")
	}
	if m.Author.ID == n.botID {
		return nil, drop("own_message")
	}
	if m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply {
		return nil, drop("system_message")
	}
	ch, err := n.channelOf(ctx, m.ChannelID, m.GuildID)
	if err != nil {
		return nil, err
	}
	mentioned := n.mentionsBot(m)
	if m.Author.Bot || m.WebhookID != "" {
		switch {
		case n.pol.allowBots == AllowBotsAll:
		case n.pol.allowBots == AllowBotsMentions && mentioned:
		default:
			return nil, drop("bot_author")
		}
		if n.pol.botsInlineMention && !containsMention(m.Content, n.botID) {
			return nil, drop("bot_not_inline_mentioned")
		}
	} else if !n.pol.admits(m.Author, m.Member) {
		// Admitted bots skip the user allowlist, as natively.
		return nil, drop("user_not_allowed")
	}
	t := &turn{ev: n.messageEvent(m)}
	src := &t.ev.Source
	src.Platform = platformName
	src.UserID = session.Str(m.Author.ID)
	src.IsBot = m.Author.Bot
	src.MessageID = m.ID
	src.MessageIsEdit = edit

	switch ch.Type {
	case discordgo.ChannelTypeDM:
		src.ChatID = m.ChannelID
		src.ChatType = session.ChatTypeDM
		src.ChatName = session.Str(m.Author.Username)
		src.UserName = session.Str(cmp.Or(m.Author.GlobalName, m.Author.Username))
		t.interrupt = isStop(t.ev.Text)
		return t, nil
	case discordgo.ChannelTypeGroupDM:
		return nil, drop("group_dm")
	}

	var parent *chanInfo
	if ch.isThread() {
		p := n.parentOf(ctx, ch)
		parent = &p
	}
	if err := n.gate(m, ch, parent, mentioned); err != nil {
		var d *dropError
		if n.pol.channelContext && !edit && errors.As(err, &d) && (d.reason == reasonNotMentioned || d.reason == reasonMentionsOthers) &&
			n.channelAdmitted(channelKeys(ch, parent)) {
			d.seen = &contract.ContextMessage{Text: t.ev.Text, Source: contract.ContextAuthor{
				UserName: memberName(m.Member, m.Author), UserID: m.Author.ID,
			}}
		}
		return nil, err
	}
	free := n.pol.free.matches(channelKeys(ch, parent))
	voice := n.pol.voiceLinked.has(ch.ID)
	guildID := cmp.Or(m.GuildID, ch.GuildID)
	guild := n.guildName(ctx, guildID)
	src.ScopeID = guildID
	src.UserName = session.Str(memberName(m.Member, m.Author))
	t.interrupt = isStop(t.ev.Text)

	switch {
	case edit && m.Thread != nil && m.Thread.ID != "":
		// An edit of a message that started a thread belongs to that thread.
		thr := infoFrom(m.Thread)
		thr.ParentID = cmp.Or(thr.ParentID, ch.ID)
		n.threadSource(src, thr, ch, guild)
	case ch.isThread():
		n.threadSource(src, ch, *parent, guild)
	case n.pol.autoThread && !edit && m.Type == discordgo.MessageTypeDefault && !n.pol.noThread.matches(channelKeys(ch, nil)) && !free && !voice && !ch.isForum():
		if ch.Type != discordgo.ChannelTypeGuildText && ch.Type != discordgo.ChannelTypeGuildNews {
			// Voice and stage text chats cannot hold message threads; the
			// native adapter posts an error there and does not dispatch.
			return nil, drop("auto_thread_unsupported")
		}
		name := threadName(m.Content, n.botID)
		id, err := n.startThread(ctx, ch.ID, m.ID, name)
		if err != nil {
			return nil, drop("auto_thread_failed")
		}
		n.threadSource(src, chanInfo{ID: id, Name: name, ParentID: ch.ID}, ch, guild)
		src.ChatTopic = session.StrOrNull(ch.Topic)
		src.AutoThreadCreated, src.AutoThreadInitialName = true, name
		if n.created != nil {
			n.created.fresh.Add(id, struct{}{})
		}
	default:
		src.ChatID = ch.ID
		src.ChatType = session.ChatTypeGroup
		src.ChatName = session.Str(guild + " / #" + ch.Name)
		src.ChatTopic = channelTopic(ch)
	}
	return t, nil
}

// gate applies the native adapter's guild-channel gates, in its order: a
// message mentioning other bots but not this one; one mentioning only
// other users (DISCORD_IGNORE_NO_MENTION, except in free-response
// channels); allowed_channels; ignored_channels; then the mention
// requirement, waived in free-response and voice-linked channels and in
// threads the bot takes part in (unless thread_require_mention).
func (n *normalizer) gate(m *wireMessage, ch chanInfo, parent *chanInfo, mentioned bool) error {
	keys := channelKeys(ch, parent)
	free := n.pol.free.matches(keys)
	if !mentioned && len(m.Mentions) > 0 {
		if slices.ContainsFunc(m.Mentions, func(u wireUser) bool { return u.Bot && u.ID != n.botID }) {
			return drop("mentions_other_bots")
		}
		if n.pol.ignoreNoMention && !free {
			return drop(reasonMentionsOthers)
		}
	}
	if !n.pol.allowed.empty() && !n.pol.allowed.matches(keys) {
		return drop("channel_not_allowed")
	}
	if n.pol.ignored.matches(keys) {
		return drop("channel_ignored")
	}
	inBotThread := ch.isThread() && n.look.participates(ch.ID) && !n.pol.threadRequireMention
	if n.pol.requireMention && !mentioned && !free && !n.pol.voiceLinked.has(ch.ID) && !inBotThread {
		return drop(reasonNotMentioned)
	}
	return nil
}

// channelAdmitted reports whether the channel of keys passes
// allowed_channels and ignored_channels.
func (n *normalizer) channelAdmitted(keys []string) bool {
	return (n.pol.allowed.empty() || n.pol.allowed.matches(keys)) && !n.pol.ignored.matches(keys)
}

// threadSource fills src for a message inside thread thr under parent.
func (n *normalizer) threadSource(src *session.Source, thr, parent chanInfo, guild string) {
	src.ChatID = thr.ID
	src.ChatType = session.ChatTypeThread
	src.ThreadID = session.Str(thr.ID)
	src.ParentChatID = thr.ParentID
	if n.created != nil {
		if name, ok := n.created.names.Get(thr.ID); ok {
			src.AutoThreadCreated, src.AutoThreadInitialName = true, name
		}
	}
	if parent.isForum() {
		src.ChatName = session.Str(guild + " / " + parent.Name + " / " + thr.Name)
		src.ChatTopic = session.StrOrNull(parent.Topic)
	} else {
		src.ChatName = session.Str(guild + " / #" + parent.Name + " / " + thr.Name)
	}
}

// channelOf resolves a message's channel. A channel unknown to Discord's
// cache and REST in an event without a guild is a DM channel.
func (n *normalizer) channelOf(ctx context.Context, channelID, guildID string) (chanInfo, error) {
	ch, err := n.look.channel(ctx, channelID)
	if err == nil {
		return ch, nil
	}
	if guildID == "" {
		return chanInfo{ID: channelID, Type: discordgo.ChannelTypeDM}, nil
	}
	if errors.Is(err, errNotFound) {
		return chanInfo{}, drop("unknown_channel")
	}
	return chanInfo{}, err
}

// parentOf returns a thread's parent, or a bare stand-in when it cannot be
// looked up (the source then lacks the parent's name, never its ids).
func (n *normalizer) parentOf(ctx context.Context, thr chanInfo) chanInfo {
	if p, err := n.look.channel(ctx, thr.ParentID); err == nil {
		return p
	}
	return chanInfo{ID: thr.ParentID, Type: discordgo.ChannelTypeGuildText}
}

// guildName returns the guild's name, or its id when the name is unknown.
func (n *normalizer) guildName(ctx context.Context, id string) string {
	if name, err := n.look.guildName(ctx, id); err == nil {
		return name
	}
	return id
}

// channelTopic is a guild channel's effective topic: voice channels have
// none; whitespace-only topics read as none.
func channelTopic(ch chanInfo) session.Nullable {
	if ch.Type == discordgo.ChannelTypeGuildVoice {
		return session.Nullable{}
	}
	return session.StrOrNull(ch.Topic)
}

// mentionsBot reports a mention of the bot in mentions or as a raw <@id> /
// <@!id> token in the content.
func (n *normalizer) mentionsBot(m *wireMessage) bool {
	if n.botID == "" {
		return false
	}
	return slices.ContainsFunc(m.Mentions, func(u wireUser) bool { return u.ID == n.botID }) || containsMention(m.Content, n.botID)
}

// containsMention reports whether s holds <@id> or <@!id>.
func containsMention(s, id string) bool {
	return strings.Contains(s, "<@"+id+">") || strings.Contains(s, "<@!"+id+">")
}

// stripMention is the native adapter's message text: the content
// stripped, then, when it mentions the bot, without its <@id> and <@!id>
// tokens and stripped again (Python's str.strip(), pytext.Strip).
func stripMention(s, id string) string {
	if id == "" || !containsMention(s, id) {
		return pytext.Strip(s)
	}
	s = strings.ReplaceAll(s, "<@"+id+">", "")
	s = strings.ReplaceAll(s, "<@!"+id+">", "")
	return pytext.Strip(s)
}

// messageEvent builds the event fields that come from the message itself.
func (n *normalizer) messageEvent(m *wireMessage) contract.Event {
	ev := contract.Event{
		Text:        stripMention(m.Content, n.botID),
		MessageType: contract.MessageText,
		MessageID:   m.ID,
	}
	if ref := m.MessageReference; ref != nil {
		ev.ReplyToMessageID = ref.MessageID
	}
	if rm := m.ReferencedMessage; rm != nil && rm.Author != nil {
		ev.ReplyTo = &contract.ReplyTo{
			Text:   rm.Content,
			Author: memberName(rm.Member, rm.Author),
			IsOwn:  rm.Author.ID == n.botID,
		}
		ev.ReplyToMessageID = cmp.Or(ev.ReplyToMessageID, rm.ID)
	}
	if len(m.Attachments) > 0 {
		ev.MediaURLs = make([]string, 0, len(m.Attachments))
		ev.Media = make([]contract.Media, 0, len(m.Attachments))
		for i, a := range m.Attachments {
			kind := mediaKind(a.ContentType, m.Flags)
			if i == 0 {
				ev.MessageType = kind
				if kind == "image" {
					ev.MessageType = contract.MessagePhoto
				}
			}
			ev.MediaURLs = append(ev.MediaURLs, a.URL)
			ev.Media = append(ev.Media, contract.Media{URL: a.URL, MIME: a.ContentType, Kind: kind, Size: a.Size, Filename: a.Filename})
		}
	}
	return ev
}

// mediaKind is an attachment's kind, one of platform.MediaKinds (the first
// attachment's gives the event's message_type, "photo" for an image).
func mediaKind(mime string, flags discordgo.MessageFlags) string {
	switch {
	case flags&discordgo.MessageFlagsIsVoiceMessage != 0:
		return "voice"
	case strings.HasPrefix(mime, "image/"):
		return "image"
	case strings.HasPrefix(mime, "video/"):
		return "video"
	case strings.HasPrefix(mime, "audio/"):
		return "audio"
	}
	return "document"
}

// memberName is the guild display name: nick, else global name, else
// username (for a webhook, the webhook's name).
func memberName(member *wireMember, u *wireUser) string {
	if member != nil && member.Nick != "" {
		return member.Nick
	}
	return cmp.Or(u.GlobalName, u.Username)
}

// isStop reports the platform-side interrupt command.
func isStop(text string) bool {
	return text == "/stop" || strings.HasPrefix(text, "/stop ")
}

// mentionToken matches user, role and channel mention tokens, with
// Python's \d: decimal digits of any script.
var mentionToken = regexp.MustCompile(`<(?:@[!&]?|#)\p{Nd}+>`)

// Auto-thread names: at most maxThreadName code points, longer text is cut
// to maxThreadName-3 plus "...".
const (
	maxThreadName     = 80
	defaultThreadName = "Hermes"
)

// threadName derives an auto-thread's name from the message text as the
// native adapter does: mentions removed, runs of (Python's) whitespace made
// one space, stripped, "Hermes" when empty, cut to 77 code points plus
// "..." above 80.
func threadName(content, botID string) string {
	s := content
	if botID != "" {
		s = strings.ReplaceAll(s, "<@"+botID+">", "")
		s = strings.ReplaceAll(s, "<@!"+botID+">", "")
	}
	s = mentionToken.ReplaceAllString(s, "")
	s = strings.Join(strings.FieldsFunc(s, pytext.IsSpace), " ")
	if s == "" {
		return defaultThreadName
	}
	if utf8.RuneCountInString(s) > maxThreadName {
		s = textsplit.TruncateRunes(s, maxThreadName-3) + "..."
	}
	return s
}
