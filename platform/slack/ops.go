package slack

import (
	"cmp"
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// send posts content as mrkdwn (chat.postMessage, mrkdwn true), split into
// 39,000-character messages, into the thread the gateway names (threadOf),
// the first part also to the channel with the tenant's reply_broadcast,
// with its unfurl_links and unfurl_media when set. The result carries the
// first message's ts. If a later part cannot be sent, it is still a
// success (platform.SendParts) whose error says how many parts went out. The first reply to a
// slash command goes to its user alone (slashReply), with no message_id,
// as natively; a send whose content extends a draft stream still open in
// the chat seals that stream instead (its message is the reply, as
// natively).
func (p *Platform) send(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "slack send: content is empty")
	}
	if r, ok := p.slashReply(ctx, tenant, t, a); ok {
		return r
	}
	if r, ok := p.sealByContent(ctx, tenant, t, a); ok {
		return r
	}
	return p.post(ctx, tenant, t, a)
}

// post posts a's content as send does, with none of send's other paths.
func (p *Platform) post(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	_, _, r := p.postParts(ctx, tenant, t, a, mrkdwnParts(a.Content), nil)
	return r
}

// postParts posts parts in order into a's thread, the last carrying
// blocks (when not nil, with its part as the text fallback). It returns
// the first and last messages' ts with platform.SendParts' result.
func (p *Platform) postParts(ctx context.Context, tenant string, t target, a *contract.Action, parts []string, blocks []slack.Block) (first, last string, r contract.Result) {
	pol := p.policy(tenant)
	thread := p.threadOf(tenant, a)
	return platform.SendParts(ctx, parts, func(i int, part string) (ts string, err error) {
		opts := []slack.MsgOption{slack.MsgOptionText(part, false)} // mrkdwn is chat.postMessage's default
		if thread != "" {
			opts = append(opts, slack.MsgOptionTS(thread))
			if pol.replyBroadcast && i == 0 {
				opts = append(opts, slack.MsgOptionBroadcast())
			}
		}
		opts = append(opts, pol.unfurlOptions()...)
		if i == len(parts)-1 && blocks != nil {
			opts = append(opts, slack.MsgOptionBlocks(blocks...))
		}
		err = p.callIn(ctx, t.team, t.channel, "chat.postMessage", func(ctx context.Context, c *slack.Client) (err error) {
			_, ts, err = c.PostMessageContext(ctx, t.channel, opts...)
			return err
		})
		if err == nil {
			p.markerNotKept(p.memory.sent(context.WithoutCancel(ctx), tenant, t.team, t.channel, ts, thread))
		}
		return ts, err
	}, func(err error) contract.Result { return p.failure(a.Op, err) })
}

// unfurlOptions are the tenant's unfurl_links and unfurl_media, when set
// (unfurl_media true is Slack's default).
func (pol *policy) unfurlOptions() []slack.MsgOption {
	var opts []slack.MsgOption
	switch {
	case pol.unfurlLinks == nil:
	case *pol.unfurlLinks:
		opts = append(opts, slack.MsgOptionEnableLinkUnfurl())
	default:
		opts = append(opts, slack.MsgOptionDisableLinkUnfurl())
	}
	if pol.unfurlMedia != nil && !*pol.unfurlMedia {
		opts = append(opts, slack.MsgOptionDisableMediaUnfurl())
	}
	return opts
}

// edit replaces a message's text (chat.update), cut to one message as
// natively.
func (p *Platform) edit(ctx context.Context, _ string, t target, a *contract.Action) contract.Result {
	ts := string(a.MessageID)
	switch {
	case !messageTS.MatchString(ts):
		return contract.Failed(contract.CodeBadRequest, "slack edit: message_id is not a Slack message ts")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "slack edit: content is empty")
	}
	text := mrkdwnParts(a.Content)[0]
	err := p.callIn(ctx, t.team, t.channel, "chat.update", func(ctx context.Context, c *slack.Client) error {
		_, _, _, err := c.UpdateMessageContext(ctx, t.channel, ts, slack.MsgOptionText(text, false))
		return err
	})
	if err != nil {
		return p.failure(contract.OpEdit, err)
	}
	return contract.OK(ts)
}

// messageTS is a Slack message ts as Slack spells it (10 digits, a dot, 6
// digits): the posted record Execute reads before an edit or delete
// (platform.MayChange) is keyed by that spelling, which Slack compares
// as a string, so another ("0…", "….0001") is refused, never sent.
var messageTS = regexp.MustCompile(`^[1-9]\d{9}\.\d{6}$`)

// deleteMessage deletes message_id (chat.delete). A message already gone
// counts as deleted, so a retried delete is idempotent.
func (p *Platform) deleteMessage(ctx context.Context, _ string, t target, a *contract.Action) contract.Result {
	ts := string(a.MessageID)
	if !messageTS.MatchString(ts) {
		return contract.Failed(contract.CodeBadRequest, "slack delete: message_id is not a Slack message ts")
	}
	err := p.callIn(ctx, t.team, t.channel, "chat.delete", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.DeleteMessageContext(ctx, t.channel, ts)
		return err
	})
	if err != nil && slackErr(err) != "message_not_found" {
		return p.failure(contract.OpDelete, err)
	}
	return contract.OK(ts)
}

// react adds the bot's reaction emoji to message_id (reactions.add), or
// takes it off with remove (reactions.remove). Slack names reactions: a
// Unicode emoji is translated (emojiNames), a :name: or bare name is taken
// as it is. A reaction already there (or already gone) counts as done.
// Reactions are best effort: any failure is a result, never a failed
// turn.
func (p *Platform) react(ctx context.Context, _ string, t target, a *contract.Action) contract.Result {
	ts := string(a.MessageID)
	name, ok := reactionName(a.Emoji)
	switch {
	case !messageTS.MatchString(ts):
		return contract.Failed(contract.CodeBadRequest, "slack react: message_id is not a Slack message ts")
	case !ok:
		return contract.Failed(contract.CodeBadRequest, "slack react: emoji is not one Slack names (use :name: for others)")
	}
	item := slack.NewRefToMessage(t.channel, ts)
	method := "reactions.add"
	if a.Remove {
		method = "reactions.remove"
	}
	err := p.callIn(ctx, t.team, t.channel, method, func(ctx context.Context, c *slack.Client) error {
		if a.Remove {
			return c.RemoveReactionContext(ctx, name, item)
		}
		return c.AddReactionContext(ctx, name, item)
	})
	if e := slackErr(err); err != nil && e != "already_reacted" && e != "no_reaction" {
		return p.failure(contract.OpReact, err)
	}
	return contract.OK("")
}

// reactionNamePattern is a Slack reaction name.
var reactionNamePattern = regexp.MustCompile(`^[a-z0-9_+'-]{1,64}$`)

// reactionName is the Slack name of emoji.
func reactionName(emoji string) (string, bool) {
	e := strings.TrimSpace(emoji)
	if name, ok := emojiNames[strings.ReplaceAll(e, "\ufe0f", "")]; ok {
		return name, true
	}
	e = strings.Trim(e, ":")
	return e, reactionNamePattern.MatchString(e)
}

// emojiNames are the Slack names of the emoji gateways react with (the
// lifecycle 👀, ✅, ❌, and Telegram's 👍 👎) and other common ones.
// Variation selectors are removed before the lookup.
var emojiNames = map[string]string{
	"👀": "eyes", "✅": "white_check_mark", "❌": "x", "👍": "+1", "👎": "-1", "🎉": "tada", "🔥": "fire",
	"🚀": "rocket", "👋": "wave", "⚠": "warning", "🚨": "rotating_light", "⛔": "no_entry", "✔": "heavy_check_mark",
	"❤": "heart", "😂": "joy", "🙏": "pray", "🤔": "thinking_face", "😀": "grinning", "😄": "smile", "😊": "blush",
	"😢": "cry", "😮": "open_mouth", "💯": "100", "⏳": "hourglass_flowing_sand", "⌛": "hourglass", "🐛": "bug",
	"💡": "bulb", "📝": "memo", "✨": "sparkles", "🤖": "robot_face", "👌": "ok_hand", "🙌": "raised_hands",
	"👏": "clap", "⭐": "star", "🔄": "arrows_counterclockwise", "❓": "question", "❗": "exclamation",
	"🛑": "octagonal_sign", "💬": "speech_balloon", "🧠": "brain", "🛠": "hammer_and_wrench", "🔧": "wrench",
	"📌": "pushpin", "🎯": "dart", "🤝": "handshake", "😅": "sweat_smile", "🥳": "partying_face", "💥": "boom",
	"⚡": "zap", "🟢": "large_green_circle", "🔴": "red_circle", "🟡": "large_yellow_circle", "😎": "sunglasses",
	"🙂": "slightly_smiling_face", "😉": "wink", "🤷": "shrug", "💪": "muscle", "🏁": "checkered_flag",
}

// getChatInfo answers get_chat_info from conversations.info: the name (a
// DM's is its peer's) and dm or group, as the native adapter does.
func (p *Platform) getChatInfo(ctx context.Context, _ string, t target, _ *contract.Action) contract.Result {
	var ch *slack.Channel
	err := p.call(ctx, t.team, "conversations.info", func(ctx context.Context, c *slack.Client) (err error) {
		ch, err = c.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: t.channel})
		return err
	})
	if err != nil {
		return p.failure(contract.OpGetChatInfo, err)
	}
	r := contract.OK("")
	typ := "group"
	if ch.IsIM {
		typ = "dm"
	}
	name := channelName(ch, t.channel, func(peer string) string { return p.names.user(ctx, t.team, peer).name })
	r.ChatInfo = &contract.ChatInfo{Name: name, Type: typ}
	return r
}

// maxThreadName bounds a thread seed's name, as natively.
const maxThreadName = 80

// threadCreate makes a thread: a Slack thread is the replies to a message,
// so with message_id it is that message's thread, and without one a seed
// message is posted (":thread: Hermes handoff — *name*", as the native
// adapter's create_handoff_thread) and its ts is the thread. The result's
// thread_id and message_id are the thread's ts.
func (p *Platform) threadCreate(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	if ts := string(a.MessageID); ts != "" {
		if !messageTS.MatchString(ts) {
			return contract.Failed(contract.CodeBadRequest, "slack thread_create: message_id is not a Slack message ts")
		}
		r := contract.OK(ts)
		r.ThreadID = ts
		return r
	}
	name := cmp.Or(textsplit.TruncateRunes(strings.TrimSpace(a.ThreadName), maxThreadName), "session")
	seed := ":thread: Hermes handoff — *" + name + "*"
	var ts string
	err := p.callIn(ctx, t.team, t.channel, "chat.postMessage", func(ctx context.Context, c *slack.Client) (err error) {
		_, ts, err = c.PostMessageContext(ctx, t.channel, slack.MsgOptionText(seed, false))
		return err
	})
	if err != nil {
		return p.failure(contract.OpThreadCreate, err)
	}
	p.markerNotKept(p.memory.sent(context.WithoutCancel(ctx), tenant, t.team, t.channel, ts, ""))
	r := contract.OK(ts)
	r.ThreadID = ts
	return r
}

// typing sets the thread's assistant status (assistant.threads.setStatus):
// content absent shows "is thinking...", a string shows it, "" clears the
// status. Slack shows a status only in a thread: without one the op does
// nothing, as natively.
func (p *Platform) typing(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	thread := p.threadOf(tenant, a)
	if thread == "" {
		return contract.OK("")
	}
	status := "is thinking..."
	if a.HasContent {
		status = textsplit.TruncateRunes(a.Content, maxStatusRunes)
	}
	err := p.callIn(ctx, t.team, t.channel, "assistant.threads.setStatus", func(ctx context.Context, c *slack.Client) error {
		return c.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
			ChannelID: t.channel, ThreadTS: thread, Status: status,
		})
	})
	if err != nil {
		return p.failure(contract.OpTyping, err)
	}
	return contract.OK("")
}

// maxStatusRunes bounds a status text.
const maxStatusRunes = 256

// maxResponseURLPosts is how many times Slack lets a response_url be
// posted to.
const maxResponseURLPosts = 5

// followUp answers a slash command through its response_url, which the
// vault keeps under the command's session (kind slack.response_url, for
// the caller's tenant only), as docs/contract.md says: ephemeral, at most
// maxResponseURLPosts posts, each claimed once (claimPosts), later parts
// with chat.postEphemeral (teamFor's token), never publicly. The tenant
// must still be allowed in the command's channel
// (platform.AuthorizeCalls), or nothing is posted.
func (p *Platform) followUp(ctx context.Context, tenant string, _ target, a *contract.Action) contract.Result {
	if a.SessionKey == "" {
		return contract.Failed(contract.CodeBadRequest, "slack follow_up: session_key is required")
	}
	if a.Kind != "" && a.Kind != string(kindResponseURL) {
		return contract.Failed(contract.CodeBadRequest, "slack follow_up: kind must be "+string(kindResponseURL))
	}
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "slack follow_up: content is empty")
	}
	ref, url, stored, ok := p.takeResponseURL(ctx, tenant, a.SessionKey)
	if !ok {
		return contract.Failed(contract.CodeCapabilityMissing, "slack follow_up: no live response_url for this session")
	}
	if ref.channel == "" {
		return contract.Declined(platformName)
	}
	ctx, hold, r := platform.AuthorizeCalls(ctx, p, tenant, ref.channel, p.clock)
	if hold == platform.HoldNone {
		return r
	}
	parts := mrkdwnParts(a.Content)
	used := ref.used
	defer func() { p.usedResponseURL(context.WithoutCancel(ctx), tenant, a.SessionKey, used) }()
	_, _, r = platform.SendParts(ctx, parts, func(_ int, part string) (string, error) {
		post := p.claimPosts(ctx, tenant, a.SessionKey, url, stored, used, 1)
		if len(post) == 0 {
			used = maxResponseURLPosts
			if ref.user == "" {
				return "", errResponseURLSpent
			}
			team, err := p.teamFor(ctx, tenant, ref.channel, ref.team)
			if err == nil {
				err = p.callIn(ctx, team, ref.channel, "chat.postEphemeral", func(ctx context.Context, c *slack.Client) error {
					_, err := c.PostEphemeralContext(ctx, ref.channel, ref.user, slack.MsgOptionText(part, false))
					return err
				})
			}
			return "", err
		}
		msg := &slack.WebhookMessage{ResponseType: "ephemeral", ReplaceOriginal: post[0] == 0, Text: part}
		if err := p.postResponseURL(ctx, url, msg); err != nil {
			return "", err
		}
		used = post[0] + 1
		return "", nil
	}, func(err error) contract.Result {
		if errors.Is(err, errResponseURLSpent) {
			return contract.Failed(contract.CodeCapabilityMissing, "slack follow_up: the response_url took its five replies")
		}
		return p.failure(contract.OpFollowUp, err)
	})
	return r
}

// errResponseURLSpent is followUp's error for a part its response_url,
// which took its five posts, cannot carry, with no user to post to
// ephemerally.
var errResponseURLSpent = errors.New("slack follow_up: the response_url took its five replies")
