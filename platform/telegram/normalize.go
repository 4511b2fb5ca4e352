package telegram

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/session"
)

// platformName is the platform value on the wire.
const platformName = "telegram"

// mapping is what the native adapter consults besides the update itself.
type mapping struct {
	botID       int64
	botUsername string // "" until getMe answered
	groupTopics map[topicKey]string
	dmTopics    map[topicKey]string
}

type topicKey struct {
	chat   int64
	thread int
}

// inbound is one normalized update.
type inbound struct {
	chatID int64
	event  contract.Event
	// msg is the message of a message update, for the group gate; nil for
	// a callback query.
	msg *models.Message
	// stop marks a new "/stop" command: it becomes an interrupt.
	stop bool
	// callbackID is set for a callback query, answered after delivery.
	callbackID string
	// prompted is when a pressed prompt was posted (its message's date,
	// Unix seconds; 0 when Telegram did not send the message).
	prompted int64
}

// Drop reasons (platform.Metrics.Dropped).
const (
	dropUnsupported = "unsupported" // an update type the connector does not ingest
	dropEmpty       = "empty"       // a service message: no text, caption or media
	dropOwn         = "own"         // the bot's own message
	dropUnclaimed   = "unclaimed"   // no tenant claims the chat
	dropDuplicate   = "duplicate"   // an update_id seen before
	dropMalformed   = "malformed"   // the webhook body is not an Update
	// dropForeignCallback: a button press whose callback data is not a
	// prompt op's hp1 token (another integration's button).
	dropForeignCallback = "foreign_callback"
	// dropEarlierTenantPrompt: a press of a prompt posted before its
	// tenant's creation (an earlier tenant's of the id), or undated soon
	// after it (earlierPrompt).
	dropEarlierTenantPrompt = "earlier_tenant_prompt"
	// dropPromptNotOwned: a press, in a chat held by grant, of a prompt
	// no live mark names the pressed tenant the poster of (route).
	dropPromptNotOwned = "prompt_not_owned"
	// dropPosterUnknown: a press whose prompt's poster the store could
	// not look up (route), retried for posterWait first.
	dropPosterUnknown = "poster_unknown"
)

// normalize maps u to the event the native Hermes Telegram adapter would
// dispatch for it; a non-empty drop says why there is none.
func normalize(u *models.Update, m *mapping) (in inbound, drop string) {
	switch {
	case u.Message != nil:
		return messageInbound(u.Message, false, m)
	case u.EditedMessage != nil:
		return messageInbound(u.EditedMessage, true, m)
	case u.ChannelPost != nil:
		return messageInbound(u.ChannelPost, false, m)
	case u.EditedChannelPost != nil:
		return messageInbound(u.EditedChannelPost, true, m)
	case u.CallbackQuery != nil:
		return callbackInbound(u.CallbackQuery, m)
	}
	return inbound{}, dropUnsupported
}

func messageInbound(msg *models.Message, edit bool, m *mapping) (inbound, string) {
	if msg.From != nil && m.botID != 0 && msg.From.ID == m.botID {
		return inbound{}, dropOwn
	}
	kind := messageKind(msg)
	text := cmp.Or(msg.Text, msg.Caption)
	if kind == "" {
		if text == "" {
			return inbound{}, dropEmpty
		}
		kind = contract.MessageText
		if isCommand(msg) {
			kind = contract.MessageCommand
		}
	}
	in := inbound{chatID: msg.Chat.ID, msg: msg}
	ev := &in.event
	ev.Text = m.triggerText(msg, text)
	ev.MessageType = kind
	ev.MessageID = strconv.Itoa(msg.ID)
	ev.Source = source(&msg.Chat, msg, msg.From, m)
	ev.Source.MessageID = ev.MessageID
	ev.Source.MessageIsEdit = edit
	if r := msg.ReplyToMessage; r != nil && r.ForumTopicCreated == nil {
		// A topic's root service message is what every topic message
		// "replies" to; only a reply to a real message is a reply.
		ev.ReplyToMessageID = strconv.Itoa(r.ID)
		ev.ReplyTo = &contract.ReplyTo{
			Text:   cmp.Or(r.Text, r.Caption),
			Author: authorName(r),
			IsOwn:  r.From != nil && m.botID != 0 && r.From.ID == m.botID,
		}
	}
	// The stop command is read in the text the gateway would receive, so
	// "/stop@bot now", passed on as "/stopnow", is no stop.
	in.stop = !edit && kind == contract.MessageCommand && isStop(ev.Text, m.botUsername)
	return in, ""
}

func callbackInbound(cq *models.CallbackQuery, m *mapping) (inbound, string) {
	var (
		chat  *models.Chat
		msg   *models.Message
		msgID int
	)
	switch {
	case cq.Message.Message != nil:
		msg = cq.Message.Message
		chat, msgID = &msg.Chat, msg.ID
	case cq.Message.InaccessibleMessage != nil:
		chat, msgID = &cq.Message.InaccessibleMessage.Chat, cq.Message.InaccessibleMessage.MessageID
	default:
		return inbound{}, dropUnsupported // an inline-mode button: no chat
	}
	if chat.ID == 0 {
		return inbound{}, dropUnsupported
	}
	in := inbound{chatID: chat.ID, callbackID: cq.ID}
	if msg != nil {
		in.prompted = int64(msg.Date)
	}
	// Only a prompt op's buttons become events; another integration's
	// callback data is dropped, never forwarded as text (its spinner is
	// still stopped: handle answers every callback query).
	promptID, optionID, ok := contract.ParsePromptToken(cq.Data)
	if !ok {
		return in, dropForeignCallback
	}
	ev := &in.event
	ev.Text = "/" + optionID
	ev.MessageType = contract.MessageCommand
	// The press is its own event: two presses on one message must not share
	// the gateway's replay-dedupe key (platform:chat_id:message_id).
	ev.MessageID = "callback:" + cq.ID
	from := cq.From // the clicking user
	ev.Source = source(chat, msg, &from, m)
	ev.Source.MessageID = strconv.Itoa(msgID)
	ev.PromptResponse = &contract.PromptResponse{
		PromptID: promptID, OptionID: optionID, Label: buttonLabel(msg, cq.Data), PromptMessageID: ev.Source.MessageID,
	}
	return in, ""
}

// buttonLabel is the text of the inline button carrying data on msg (the
// message the callback came from, when Telegram still sends it), or "".
func buttonLabel(msg *models.Message, data string) string {
	if msg == nil || msg.ReplyMarkup == nil {
		return ""
	}
	for _, row := range msg.ReplyMarkup.InlineKeyboard {
		for _, b := range row {
			if b.CallbackData == data {
				return b.Text
			}
		}
	}
	return ""
}

// source builds the SessionSource of a message in chat by from. msg may be
// nil (a callback on an inaccessible message): then no thread is known.
func source(chat *models.Chat, msg *models.Message, from *models.User, m *mapping) session.Source {
	src := session.Source{
		Platform: platformName,
		ChatID:   strconv.FormatInt(chat.ID, 10),
		ChatType: chatType(chat.Type),
		ChatName: chatName(chat),
	}
	if chat.Type == models.ChatTypeChannel {
		// Channel posts have no author: the channel is the participant.
		src.UserID = session.Str(src.ChatID)
		src.UserName = session.StrOrNull(chat.Title)
	} else if from != nil && from.ID != 0 {
		src.UserID = session.Str(strconv.FormatInt(from.ID, 10))
		src.UserName = session.StrOrNull(fullName(from.FirstName, from.LastName))
		src.IsBot = from.IsBot
	}
	thread := threadID(chat, msg)
	if thread != 0 {
		src.ThreadID = session.Str(strconv.Itoa(thread))
	}
	src.ChatTopic = session.StrOrNull(topicName(chat, msg, thread, m))
	return src
}

// threadID is the routing thread of msg: in a forum every message_thread_id
// counts and the General topic (no id) is 1; elsewhere only a real topic
// message (is_topic_message) has one, since a reply's message_thread_id is
// just its reply chain.
func threadID(chat *models.Chat, msg *models.Message) int {
	forum := chat.IsForum && isGroup(chat)
	switch {
	case forum && msg != nil:
		return cmp.Or(msg.MessageThreadID, generalTopic)
	case forum:
		return generalTopic
	case msg != nil && msg.IsTopicMessage:
		return msg.MessageThreadID
	}
	return 0
}

// generalTopic is the thread id of a forum's General topic. It is never sent
// as message_thread_id ("message thread not found").
const generalTopic = 1

func topicName(chat *models.Chat, msg *models.Message, thread int, m *mapping) string {
	if thread == 0 {
		return ""
	}
	k := topicKey{chat: chat.ID, thread: thread}
	if chat.Type != models.ChatTypePrivate {
		return m.groupTopics[k]
	}
	if name := m.dmTopics[k]; name != "" {
		return name
	}
	if msg != nil && msg.ReplyToMessage != nil && msg.ReplyToMessage.ForumTopicCreated != nil {
		return msg.ReplyToMessage.ForumTopicCreated.Name
	}
	return ""
}

// chatType maps Telegram's chat type as the native adapter does: anything
// that is not a group, supergroup or channel is a DM.
func chatType(t models.ChatType) string {
	switch t {
	case models.ChatTypeGroup, models.ChatTypeSupergroup:
		return session.ChatTypeGroup
	case models.ChatTypeChannel:
		return session.ChatTypeChannel
	}
	return session.ChatTypeDM
}

// chatName is chat.title, else the chat's full name (PTB's Chat.full_name).
func chatName(chat *models.Chat) session.Nullable {
	if chat.Title != "" {
		return session.Str(chat.Title)
	}
	return session.StrOrNull(fullName(chat.FirstName, chat.LastName))
}

// fullName is PTB's full_name: first, plus " " + last when there is a last
// name; nothing without a first name.
func fullName(first, last string) string {
	if first == "" {
		return ""
	}
	if last == "" {
		return first
	}
	return first + " " + last
}

// authorName names the author of a replied-to message.
func authorName(msg *models.Message) string {
	if msg.From != nil {
		return fullName(msg.From.FirstName, msg.From.LastName)
	}
	if msg.SenderChat != nil {
		return msg.SenderChat.Title
	}
	return msg.Chat.Title
}

// messageTypes is the gateway message_type of each kind of attachment
// (fileOf).
var messageTypes = map[string]string{"image": contract.MessagePhoto, "video": contract.MessageVideo,
	"voice": contract.MessageVoice, "audio": contract.MessageAudio, "document": contract.MessageDocument}

// messageKind is the gateway message_type of a media message, "" otherwise.
func messageKind(msg *models.Message) string {
	if f, ok := fileOf(msg); ok {
		return messageTypes[f.kind]
	}
	switch {
	case msg.Sticker != nil:
		return contract.MessageSticker
	case msg.Location != nil || msg.Venue != nil:
		return contract.MessageLocation
	}
	return ""
}

// isCommand reports a message that starts with a bot_command entity.
func isCommand(msg *models.Message) bool {
	return len(msg.Entities) > 0 && msg.Entities[0].Type == models.MessageEntityTypeBotCommand &&
		msg.Entities[0].Offset == 0
}

// isStop reports "/stop" or "/stop@<this bot>", alone or followed by
// arguments. Before the bot's username is known any @suffix is accepted.
func isStop(text, botUsername string) bool {
	cmd, _, _ := strings.Cut(text, " ")
	cmd, _, _ = strings.Cut(cmd, "\n")
	name, at, addressed := strings.Cut(cmd, "@")
	if !strings.EqualFold(name, "/stop") {
		return false
	}
	return !addressed || botUsername == "" || strings.EqualFold(at, botUsername)
}
