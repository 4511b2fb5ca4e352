package telegram

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"

	"connector/internal/pytext"
)

// This file owns the native adapter's group trigger rules: which group
// messages of a tenant become turns under its policy, in the native order,
// and how a message addresses this bot or others. DMs and channel posts are
// never gated.

// Gate drop reasons (platform.Metrics.Dropped).
const (
	dropTopicNotAllowed = "topic_not_allowed"   // outside allowed_topics
	dropThreadIgnored   = "thread_ignored"      // in ignored_threads
	dropOtherBots       = "mentions_other_bots" // its @…bot mentions all name other bots
	dropChatNotAllowed  = "chat_not_allowed"    // outside allowed_chats
	dropBotNotMentioned = "bot_not_mentioned"   // another bot, without a mention (bots_require_mention)
	dropNotMentioned    = "not_mentioned"       // no trigger while require_mention
	dropObserved        = "observed"            // held back and kept as context (observe mode)
)

// admit applies the native adapter's group trigger rules to msg, a new or
// edited message of a group or supergroup; it returns the drop reason, or
// "" to deliver. The order is the native one: allowed_topics and
// ignored_threads, exclusive bot mentions, allowed_chats (which only a
// guest-mode mention crosses), free-response chats and topics, the bot
// loop breaker, then require_mention with its triggers.
func (pol *policy) admit(msg *models.Message, m *mapping) string {
	if !isGroup(&msg.Chat) {
		return ""
	}
	thread := threadID(&msg.Chat, msg)
	if !pol.topicAllowed(thread) {
		return dropTopicNotAllowed
	}
	if pol.ignoredThreads[thread] {
		return dropThreadIgnored
	}
	if pol.exclusiveBotMentions && m.mentionsOnlyOtherBots(msg) {
		return dropOtherBots
	}
	mentioned := m.mentionsBot(msg)
	guest := pol.guestMode && mentioned
	if pol.allowedChats != nil && !pol.allowedChats[msg.Chat.ID] {
		if guest {
			return ""
		}
		return dropChatNotAllowed
	}
	if guest || pol.free(msg.Chat.ID, thread) {
		return ""
	}
	if pol.botsRequireMention && msg.From != nil && msg.From.IsBot && msg.From.ID != m.botID && !mentioned {
		return dropBotNotMentioned
	}
	if !pol.requireMention || m.repliesToBot(msg) || mentioned || pol.matchesPatterns(msg) {
		return ""
	}
	return dropNotMentioned
}

// observes reports whether observe mode keeps msg, a group message admit
// dropped, as context: it is not a command, is in a chat observe mode
// covers, passes the topic gates (natively checked against the raw
// message_thread_id here), is not for other bots, is not free-response, and
// is held back only by require_mention.
func (pol *policy) observes(msg *models.Message, m *mapping) bool {
	if !pol.observe || !isGroup(&msg.Chat) || !pol.observeChats[msg.Chat.ID] || isCommand(msg) {
		return false
	}
	raw := msg.MessageThreadID
	if !pol.topicAllowed(raw) || pol.ignoredThreads[raw] {
		return false
	}
	if pol.exclusiveBotMentions && m.mentionsOnlyOtherBots(msg) {
		return false
	}
	if pol.free(msg.Chat.ID, threadID(&msg.Chat, msg)) || !pol.requireMention {
		return false
	}
	return !m.repliesToBot(msg) && !m.mentionsBot(msg) && !pol.matchesPatterns(msg)
}

// sharesSessions reports whether observe mode re-sources msg, a delivered
// message: one of a chat observe mode covers, not a command (observe.go).
func (pol *policy) sharesSessions(msg *models.Message) bool {
	return pol.observe && isGroup(&msg.Chat) && pol.observeChats[msg.Chat.ID] && !isCommand(msg)
}

// topicAllowed applies allowed_topics to a thread id (0: none, which counts
// as the General topic 1).
func (pol *policy) topicAllowed(thread int) bool {
	return pol.allowedTopics == nil || pol.allowedTopics[cmp.Or(thread, generalTopic)]
}

// free reports a free-response chat, or topic (a message without a thread
// is topic 1).
func (pol *policy) free(chat int64, thread int) bool {
	return pol.freeChats[chat] || pol.freeTopics[topicKey{chat: chat, thread: cmp.Or(thread, generalTopic)}]
}

// matchesPatterns reports a mention_patterns match in the text or caption.
func (pol *policy) matchesPatterns(msg *models.Message) bool {
	return slices.ContainsFunc(pol.patterns, func(re *regexp.Regexp) bool {
		return msg.Text != "" && re.MatchString(msg.Text) || msg.Caption != "" && re.MatchString(msg.Caption)
	})
}

func isGroup(chat *models.Chat) bool {
	return chat.Type == models.ChatTypeGroup || chat.Type == models.ChatTypeSupergroup
}

// repliesToBot reports a reply to one of the bot's messages (a topic
// message the bot's own topic creation counts, as natively).
func (m *mapping) repliesToBot(msg *models.Message) bool {
	r := msg.ReplyToMessage
	return r != nil && r.From != nil && r.From.ID == m.botID
}

// mentionsBot reports whether msg addresses this bot: a mention entity
// "@<username>" (any case), a text mention of the bot's user, a
// "/command@<username>", or, in a text or caption without entities, a bare
// "@<username>".
func (m *mapping) mentionsBot(msg *models.Message) bool {
	own := strings.ToLower(m.botUsername)
	for _, src := range entitySources(msg) {
		for _, e := range src.entities {
			switch e.Type {
			case models.MessageEntityTypeMention:
				if span, ok := entitySpan(src.text, e); ok && own != "" && strings.EqualFold(strings.TrimSpace(span), "@"+own) {
					return true
				}
			case models.MessageEntityTypeTextMention:
				if e.User != nil && e.User.ID == m.botID {
					return true
				}
			case models.MessageEntityTypeBotCommand:
				span, ok := entitySpan(src.text, e)
				if at := strings.IndexByte(span, '@'); ok && own != "" && at >= 0 && strings.EqualFold(strings.TrimSpace(span[at:]), "@"+own) {
					return true
				}
			}
		}
	}
	if own == "" {
		return false
	}
	_, mentioned := m.botHandles(msg)[own]
	return mentioned
}

// mentionsOnlyOtherBots reports a message whose explicit bot handles all
// name other bots. Before the bot's username is known nothing is excluded.
func (m *mapping) mentionsOnlyOtherBots(msg *models.Message) bool {
	own := strings.ToLower(m.botUsername)
	if own == "" {
		return false
	}
	handles := m.botHandles(msg)
	_, self := handles[own]
	return len(handles) > 0 && !self
}

// foreignBotHandle is the shape of another bot's username; the bot's own
// handle is recognized by identity whatever its shape.
var foreignBotHandle = regexp.MustCompile(`(?i)^[a-z0-9_]{2,29}bot$`)

// botHandles collects the explicit bot handles msg names, lower-cased:
// mention entities and "/command@handle" entities that are bot-shaped (or
// this bot's own), and, in a text or caption that has no entities, bare
// "@handle" words.
func (m *mapping) botHandles(msg *models.Message) map[string]struct{} {
	own := strings.ToLower(m.botUsername)
	var handles map[string]struct{}
	add := func(h string) {
		h = strings.ToLower(h)
		if h == "" || h != own && !foreignBotHandle.MatchString(h) {
			return
		}
		if handles == nil {
			handles = make(map[string]struct{}, 1)
		}
		handles[h] = struct{}{}
	}
	for _, src := range entitySources(msg) {
		if len(src.entities) == 0 {
			bareHandles(src.text, add)
			continue
		}
		for _, e := range src.entities {
			if e.Type != models.MessageEntityTypeMention && e.Type != models.MessageEntityTypeBotCommand {
				continue
			}
			span, ok := entitySpan(src.text, e)
			if !ok {
				continue
			}
			span = strings.TrimSpace(span)
			if e.Type == models.MessageEntityTypeMention {
				add(strings.TrimLeft(span, "@"))
			} else if at := strings.IndexByte(span, '@'); at >= 0 {
				add(strings.TrimSpace(span[at+1:]))
			}
		}
	}
	return handles
}

// bareHandles calls add for every "@handle" word of text, as the native
// fallback pattern (?<![A-Za-z0-9_`/])@([A-Za-z0-9_]{2,31})\b finds them:
// not preceded by a letter, digit, _, ` or /, 2 to 31 ASCII letters,
// digits or _, then no further word character (Python's \w,
// pytext.IsWord).
func bareHandles(text string, add func(string)) {
	for i := 0; i < len(text); i++ {
		if text[i] != '@' {
			continue
		}
		if i > 0 && (isHandleByte(text[i-1]) || text[i-1] == '`' || text[i-1] == '/') {
			continue
		}
		end := i + 1
		for end < len(text) && isHandleByte(text[end]) {
			end++
		}
		if n := end - i - 1; n < 2 || n > 31 {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(text[end:]); end < len(text) && pytext.IsWord(r) {
			continue
		}
		add(text[i+1 : end])
		i = end - 1
	}
}

func isHandleByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// entitySource is a text or caption with its entities.
type entitySource struct {
	text     string
	entities []models.MessageEntity
}

func entitySources(msg *models.Message) [2]entitySource {
	return [2]entitySource{{msg.Text, msg.Entities}, {msg.Caption, msg.CaptionEntities}}
}

// entitySpan returns the text an entity covers; Telegram counts offsets
// and lengths in UTF-16 code units. As natively, a span past the end is cut
// there, and one that starts beyond the text or splits a surrogate pair is
// empty (not ok).
func entitySpan(text string, e models.MessageEntity) (string, bool) {
	if e.Offset < 0 || e.Length <= 0 {
		return "", false
	}
	from, to := e.Offset, e.Offset+e.Length
	start, end := -1, -1
	unit := 0
	for i, r := range text {
		if unit == from {
			start = i
		}
		if unit == to {
			end = i
			break
		}
		n := 1
		if r >= 0x10000 {
			n = 2
		}
		if from > unit && from < unit+n || to > unit && to < unit+n {
			return "", false
		}
		unit += n
	}
	if end < 0 {
		end = len(text)
	}
	if start < 0 {
		return "", false
	}
	return text[start:end], start < end
}
