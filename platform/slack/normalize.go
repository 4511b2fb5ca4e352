package slack

import (
	"cmp"
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/pytext"
	"connector/session"
)

// This file turns a Slack message event into the SessionSource and
// MessageEvent the native adapter builds (plugins/platforms/slack/
// adapter.py@00067189: _prefilter_inbound, _handle_slack_message_impl,
// _session_thread_ts, _build_message_event), under one tenant's policy;
// gate.go holds the channel gate. Every Slack case of
// testdata/platform_events_slack_whatsapp.json runs through it
// (NormalizeFixture).

// platformName is the wire platform.
const platformName = "slack"

// Drop reasons (Metrics.Dropped): why a Slack event starts no turn.
const (
	dropMalformed        = "malformed"
	dropUnsupported      = "unsupported"
	dropDuplicate        = "duplicate"
	dropUnclaimed        = "unclaimed"
	dropEditOfProcessed  = "edit_of_processed_message"
	dropChannelIgnored   = "channel_ignored"
	dropBotSender        = "bot_sender"
	dropDeleted          = "message_deleted"
	dropDMsDisabled      = "dms_disabled"
	dropUserNotAllowed   = "user_not_allowed"
	dropChannelNotAllow  = "channel_not_allowed"
	dropOtherUser        = "addressed_to_other_user"
	dropStrictMention    = "strict_mention"
	dropThreadMention    = "thread_require_mention"
	dropMentionRequired  = "mention_required"
	dropReaction         = "reaction_routing_disabled"
	dropForeignAction    = "foreign_action"
	dropUnknownPrompt    = "unknown_prompt"
	dropPromptNotOwned   = "prompt_not_owned" // a press of a prompt whose tenant may no longer act in its channel
	dropLifecycle        = "lifecycle"
	dropCommandNotRouted = "command_not_routed"
	dropOverloaded       = "overloaded"
	dropStaleUninstall   = "stale_uninstall" // an uninstall older than the install (ingest.go uninstalled)
)

// lookups is what normalization asks Slack: live, the Web API with a
// bounded cache (names.go); in a fixture, the case's context.
type lookups interface {
	// user resolves a user to its display name (users.info with team's
	// token: display_name, real_name, user.real_name, name; any failure:
	// the id) and whether it is a bot. A message's names are read with
	// the token of the workspace whose installation got it (a Slack
	// Connect partner's too), never with the sender's workspace's: that
	// one may be another tenant's.
	user(ctx context.Context, team, user string) userInfo
	// channelName resolves a conversation to its name, an IM to its peer's
	// name (conversations.info; any failure: the id).
	channelName(ctx context.Context, team, channel string) string
	// history reads thread ts of channel (conversations.replies, its
	// root first); ok is false when it cannot be read.
	history(ctx context.Context, team, channel, ts string) ([]slack.Message, bool)
	// reacted reads the message ts a reaction was made to
	// (conversations.replies: it comes first); ok is false when it cannot
	// be read.
	reacted(ctx context.Context, team, channel, ts string) ([]slack.Message, bool)
}

// userInfo is a resolved user.
type userInfo struct {
	name  string
	isBot bool
}

// rootIn is thread ts's root in its history h, nil when h lacks it.
func rootIn(h []slack.Message, ts string) *slack.Message {
	for i := range h {
		if h[i].Timestamp == ts {
			return &h[i]
		}
	}
	return nil
}

// threadState is what the native adapter remembers of a workspace's
// messages and threads: the markers of memory.go (live: kept in the
// store). A question it cannot answer is an error: the event is not
// stored, and its source sends it again.
type threadState interface {
	// has reports whether the marker kind/key is set.
	has(ctx context.Context, kind markKind, key string) (bool, error)
	// set sets the marker kind/key.
	set(ctx context.Context, kind markKind, key string) error
}

// message is one message-shaped event ready for normalization.
type message struct {
	ev *wireEvent // the message; for an edit, the edited message
	// edit is set for message_changed (ts is the original message's).
	edit bool
	// scope is the workspace of the source (_event_team_id: the event's
	// team first, then the envelope's).
	scope string
	// install is the workspace whose installation got the event (the
	// envelope's team): its token and tenant.
	install string
	// dedupeKey is the native dedupe key "<team>:<ts>" (for an edit, the
	// edit's own ts); live, its channel qualifies it (liveDedupeKey).
	dedupeKey string
	// force, set for a message a reaction synthesized, skips the mention
	// rule of the channel gate (not allowed_channels, nor a message
	// addressed to another user).
	force bool
	// noThread, set for a synthesized message sent to a channel's top
	// level, keys it without a thread.
	noThread bool
	// routed, when set, is the tenant the message goes to, decided before
	// (a reaction is routed where it was made).
	routed *routing
}

// routing is where a message goes: a tenant, as created when it was
// routed (vault.Creation), and whether its author is linked to it (the
// owner floor).
type routing struct {
	tenant  string
	created time.Time
	owner   bool
}

// newMessage reads a message or app_mention event of envelope env; ok is
// false when it is not one (or an edit without its message).
func newMessage(env *envelope, ev *wireEvent) (message, bool) {
	m := message{ev: ev, install: env.installTeam()}
	if ev.Type != "message" && ev.Type != "app_mention" {
		return message{}, false
	}
	changedTS := ""
	if ev.Subtype == "message_changed" {
		inner := ev.Message
		if inner == nil {
			return message{}, false
		}
		// _normalize_changed_message: the inner message, with the
		// envelope's channel, channel_type and team when it lacks them.
		edited := *inner
		edited.Channel = cmp.Or(edited.Channel, ev.Channel)
		edited.ChannelType = cmp.Or(edited.ChannelType, ev.ChannelType)
		if !pytext.Truthy(edited.Team) && pytext.Truthy(ev.Team) {
			edited.Team = ev.Team
		}
		edited.TeamID = cmp.Or(edited.TeamID, ev.TeamID)
		editTS := ""
		if inner.Edited != nil {
			editTS = inner.Edited.TS
		}
		changedTS = cmp.Or(ev.EventTS, editTS)
		if changedTS == "" && ev.TS != inner.TS {
			changedTS = ev.TS
		}
		if changedTS == "" && inner.TS != "" {
			changedTS = inner.TS + ":changed"
		}
		m.ev, m.edit = &edited, true
	}
	m.scope = eventTeam(m.ev, env)
	if ts := cmp.Or(changedTS, m.ev.TS); ts != "" {
		m.dedupeKey = m.scope + ":" + ts
		if m.scope == "" {
			m.dedupeKey = ts
		}
	}
	return m, true
}

// liveDedupeKey is the key a live copy of m is deduplicated on: the
// native key of its channel. Slack's ts are unique per channel only, so
// the native "<team>:<ts>" would drop a message of another channel (of
// another tenant, maybe) that has the same ts; the message and app_mention
// of one mention share their channel as well as their ts.
func (m *message) liveDedupeKey() string { return m.ev.Channel + "/" + m.dedupeKey }

// eventTeam is _event_team_id: the event's team_id or team, then the
// envelope's, then its first authorization's.
func eventTeam(ev *wireEvent, env *envelope) string {
	if ev.TeamID != "" {
		return ev.TeamID
	}
	if t := teamOf(ev.Team); t != "" {
		return t
	}
	return cmp.Or(env.TeamID, env.installTeam())
}

// declaredBot is _event_declares_bot_sender: the event itself says a bot
// sent it (bot_id, bot_profile, subtype bot_message, user_profile.is_bot,
// or an app_id without client_msg_id from a user not in api_human_users).
func declaredBot(ev *wireEvent, pol *policy) bool {
	if ev.BotID != "" || pytext.Truthy(ev.BotProfile) || ev.Subtype == "bot_message" || profileIsBot(ev.UserProfile) {
		return true
	}
	if ev.AppID != "" && ev.ClientMsgID == "" {
		return !pol.apiHumans[ev.User]
	}
	return false
}

// normalizer normalizes one tenant's messages.
type normalizer struct {
	// tenant is the tenant whose thread markers are read and set
	// (threadMark).
	tenant string
	pol    *policy
	look   lookups
	state  threadState
	// bot is the bot user of the message's workspace (mentions of it wake
	// the bot and are removed from the text).
	bot string
	// owner waives the mention gates: the author is linked to the tenant
	// (the owner floor of author-first routing).
	owner bool
	// clock runs the deadline of the lookups of a message's mentions (the
	// platform's clock, which the budgets wait on).
	clock clock.Clock
	// err is the first question state could not answer (normalize
	// returns it).
	err error
	// warn logs a marker state failed to keep (nil: not logged).
	warn func(error)
}

// ask returns state's answer, recording its error: an unanswered question
// counts as no.
func (n *normalizer) ask(ok bool, err error) bool {
	if err != nil && n.err == nil {
		n.err = err
	}
	return ok && err == nil
}

// remember records a marker state failed to keep: the turn goes on (the
// marker only saves a later mention), and the failure is logged by the
// caller through warn.
func (n *normalizer) remember(err error) {
	if err != nil && n.warn != nil {
		n.warn(err)
	}
}

// turn is a normalized message.
type turn struct {
	ev contract.Event
	// thread is the session's thread ts ("" when none).
	thread string
	files  []wireFile
	// rootFiles are the files of the thread's root, when the turn enters
	// the thread: its images lead the turn's media (threadcontext.go).
	rootFiles []wireFile
}

// normalize runs the native pipeline on m: the prefilter's per-tenant
// drops, the DM and user gates, the channel gate, then the event. It
// returns the turn, or the reason none starts, or the error of a question
// state could not answer (the message must not be confirmed).
func (n *normalizer) normalize(ctx context.Context, m *message) (*turn, string, error) {
	t, drop := n.run(ctx, m)
	if n.err != nil {
		return nil, "", n.err
	}
	return t, drop, nil
}

// run is normalize without the state's error.
func (n *normalizer) run(ctx context.Context, m *message) (*turn, string) {
	ev, pol := m.ev, n.pol
	if pol.ignoreAll || pol.ignored[ev.Channel] {
		return nil, dropChannelIgnored
	}
	blocks := decodeBlocks(ev.Blocks)
	routing := mentionText(ev.Text, blocks)
	if n.dropBotSender(ctx, m, routing) {
		return nil, dropBotSender
	}
	if ev.Subtype == "message_deleted" {
		return nil, dropDeleted
	}
	channelType := ev.ChannelType
	if channelType == "" && strings.HasPrefix(ev.Channel, "D") {
		channelType = "im"
	}
	isDM := channelType == "im" || channelType == "mpim"
	if isDM && pol.disableDMs {
		return nil, dropDMsDisabled
	}
	if ev.User != "" && !pol.admits(ev.User) {
		return nil, dropUserNotAllowed
	}
	thread := n.sessionThread(m, isDM)
	mentioned := (n.bot != "" && strings.Contains(routing, "<@"+n.bot+">")) || pol.mentionPattern(routing)
	if n.peerBot(ctx, m, mentioned) {
		return nil, dropBotSender
	}
	// The native adapter skips the gate while it does not know its bot
	// user, which would let every channel message through, past
	// allowed_channels too. Here the gate holds (fail closed): an unknown
	// bot only means no mention of it is recognized.
	if channelType != "im" && !n.owner {
		if drop := n.gate(ctx, m, routing, mentioned); drop != "" {
			return nil, drop
		}
	}
	return n.build(ctx, m, blocks, thread, isDM, mentioned), ""
}

// dropBotSender is _drop_bot_sender: a bot's message is dropped unless
// allow_bots admits it; the bot's own messages always are.
func (n *normalizer) dropBotSender(ctx context.Context, m *message, routing string) bool {
	ev := m.ev
	isBot := declaredBot(ev, n.pol)
	if !isBot && ev.User != "" && ev.ClientMsgID == "" {
		isBot = n.look.user(ctx, m.install, ev.User).isBot
	}
	switch {
	case !isBot:
		return false
	case n.pol.allowBots == AllowBotsNone:
		return true
	case n.pol.allowBots == AllowBotsMentions && n.bot != "" && !strings.Contains(routing, "<@"+n.bot+">"):
		return true
	}
	return ev.User != "" && ev.User == n.bot
}

// peerBot is _peer_bot_drop: a message of another bot user (a peer agent
// posting as a user) is dropped unless allow_bots admits it.
func (n *normalizer) peerBot(ctx context.Context, m *message, mentioned bool) bool {
	ev := m.ev
	if ev.User == "" || ev.User == n.bot {
		return false
	}
	if !declaredBot(ev, n.pol) && !n.look.user(ctx, m.install, ev.User).isBot {
		return false
	}
	return n.pol.allowBots == AllowBotsNone || (n.pol.allowBots == AllowBotsMentions && !mentioned)
}

// sessionThread is _session_thread_ts: DMs key a top-level message on its
// own ts (dm_top_level_threads_as_sessions), channels a thread reply on
// its root and a top-level message on its own ts (reply_in_thread), and a
// reaction's turn sent to a channel's top level on no thread.
func (n *normalizer) sessionThread(m *message, isDM bool) string {
	ev := m.ev
	if isDM {
		if ev.ThreadTS != "" {
			return ev.ThreadTS
		}
		if n.pol.dmTopLevelThreads {
			return ev.TS
		}
		return ""
	}
	if m.noThread {
		return ev.ThreadTS
	}
	if ev.ThreadTS != "" && ev.ThreadTS != ev.TS {
		return ev.ThreadTS
	}
	if n.pol.replyInThread {
		return ev.TS
	}
	return ""
}

// mentionNamesDeadline bounds the lookups of the names of one message's
// mentions, together (and those of the authors of a thread's context,
// threadcontext.go); a name not resolved by then stays its id.
const mentionNamesDeadline = 2 * lookupDeadline

// userMention matches a user mention, with or without a label.
var userMention = regexp.MustCompile(`<@([A-Z0-9]+)(?:\|[^>]*)?>`)

// build makes the event of an admitted message (_apply_bot_mention,
// _build_message_event).
func (n *normalizer) build(ctx context.Context, m *message, blocks []any, thread string, isDM, mentioned bool) *turn {
	ev := m.ev
	original := ev.Text
	probe := strings.TrimLeft(original, " \t\n\r\v\f")
	command := strings.HasPrefix(probe, "/")
	text := original
	if len(blocks) > 0 && !command {
		text = withBlockText(text, blocks, n.bot)
		if dump := blockPayload(ev.Blocks); dump != "" {
			text = strings.TrimSpace(strings.TrimSpace(text) + "\n\n" + dump)
		}
	}
	text = withUnfurls(text, ev.Attachments)
	if mentioned && n.bot != "" {
		mention := "<@" + n.bot + ">"
		text = strings.TrimSpace(strings.ReplaceAll(text, mention, ""))
		if stripped := strings.TrimSpace(strings.ReplaceAll(original, mention, "")); strings.HasPrefix(stripped, "/") {
			text, probe, command = stripped, stripped, true
		}
		if thread != "" && !n.pol.strictMention && !n.pol.threadRequireMention {
			n.remember(n.state.set(ctx, markMentioned, threadMark(n.tenant, m.scope, ev.Channel, thread)))
		}
	}
	t := &turn{thread: thread}
	msgType := "text"
	for _, f := range ev.Files {
		if f.FileAccess == "check_file_info" && f.ID != "" {
			t.files = append(t.files, f) // a Slack Connect stub: described when fetched (attachFiles)
			continue
		}
		if f.URLPrivateDownload == "" && f.URLPrivate == "" {
			continue
		}
		kind := fileKind(&f)
		if kind == "document" && (f.Size <= 0 || f.Size > maxDocumentBytes) {
			continue // _cache_slack_document skips it
		}
		t.files = append(t.files, f)
		if msgType == "text" || messageTypeRank[kindMessageType[kind]] < messageTypeRank[msgType] {
			msgType = kindMessageType[kind]
		}
	}
	if command {
		msgType, text = "command", probe
	} else {
		// One deadline for all the mentions: a message may hold thousands,
		// and it must be stored within Slack's 3 s.
		mctx, cancel := within(ctx, n.clock, mentionNamesDeadline)
		defer cancel()
		text = userMention.ReplaceAllStringFunc(text, func(mention string) string {
			id := userMention.FindStringSubmatch(mention)[1]
			name := strings.TrimSpace(n.look.user(mctx, m.install, id).name)
			return "@" + cmp.Or(name, id)
		})
	}
	src := session.Source{
		Platform:      platformName,
		ChatID:        ev.Channel,
		ChatName:      session.Str(n.look.channelName(ctx, m.install, ev.Channel)),
		ChatType:      session.ChatTypeGroup,
		UserID:        session.StrOrNull(ev.User),
		UserName:      session.Str(n.look.user(ctx, m.install, ev.User).name),
		ThreadID:      session.StrOrNull(thread),
		ScopeID:       m.scope,
		MessageID:     ev.TS,
		IsBot:         declaredBot(ev, n.pol),
		MessageIsEdit: m.edit,
	}
	if isDM {
		src.ChatType = session.ChatTypeDM
	}
	t.ev = contract.Event{Text: text, MessageType: msgType, MessageID: ev.TS, Source: src}
	if thread != "" && thread != ev.TS {
		t.ev.ReplyToMessageID = thread
	}
	return t
}

// maxDocumentBytes is the largest document the native adapter fetches
// (Slack's bot upload cap).
const maxDocumentBytes = 20 << 20

// fileKind is _slack_file_kind, in the contract's media kinds: image,
// audio, voice (an audio-only clip Slack labels video), video, document.
func fileKind(f *wireFile) string {
	switch {
	case strings.HasPrefix(f.Mimetype, "image/"):
		return "image"
	case strings.HasPrefix(f.Mimetype, "audio/"):
		return "audio"
	case strings.HasPrefix(f.Mimetype, "video/") && (strings.EqualFold(strings.TrimSpace(f.Subtype), "slack_audio") ||
		strings.HasPrefix(strings.ToLower(strings.TrimSpace(f.Name)), "audio_message")):
		return "voice"
	case strings.HasPrefix(f.Mimetype, "video/"):
		return "video"
	}
	return "document"
}

// kindMessageType is the message_type of a media kind, and
// messageTypeRank the native precedence among them (_media_message_type:
// photo, then video, then voice, else document).
var (
	kindMessageType = map[string]string{"image": "photo", "video": "video", "audio": "voice", "voice": "voice", "document": "document"}
	messageTypeRank = map[string]int{"photo": 0, "video": 1, "voice": 2, "document": 3}
)
