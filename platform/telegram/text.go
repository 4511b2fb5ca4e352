package telegram

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"

	"connector/internal/pytext"
)

// This file owns the text the gateway receives for a message: the native
// adapter removes its own bot's @username from it (group_trigger_text and
// _clean_bot_trigger_text). docs/settings-parity.md ("Telegram message
// text") lists the cases; TestTelegramMessageTextParity checks each.

// triggerText is the text of msg, a message the tenant's gateway receives,
// as the native group_trigger_text passes it on: cleaned of the bot's
// mentions (cleanTriggerText), except in a group message that also names
// someone else, whose text stays whole. Commands are cleaned like any
// text, so "/model@bot gpt-5" becomes "/modelgpt-5", as natively.
func (m *mapping) triggerText(msg *models.Message, text string) string {
	if isGroup(&msg.Chat) && m.mentionsOthers(msg) {
		return text
	}
	return m.cleanTriggerText(text)
}

// heldBackText is the text of msg, a group message observe mode holds back,
// as the native adapter keeps it: a text as written, a caption cleaned of
// the bot's mentions whoever else it names.
func (m *mapping) heldBackText(msg *models.Message) string {
	if msg.Text != "" {
		return msg.Text
	}
	return m.cleanTriggerText(msg.Caption)
}

// mentionsOthers reports whether msg names someone other than this bot: a
// mention entity of another handle, or a text mention of another user
// (the native mentions_other_participants).
func (m *mapping) mentionsOthers(msg *models.Message) bool {
	own := strings.ToLower(m.botUsername)
	for _, src := range entitySources(msg) {
		for _, e := range src.entities {
			switch e.Type {
			case models.MessageEntityTypeMention:
				span, _ := entitySpan(src.text, e)
				handle := strings.ToLower(strings.TrimLeft(pytext.Strip(span), "@"))
				if handle != "" && handle != own {
					return true
				}
			case models.MessageEntityTypeTextMention:
				if e.User != nil && e.User.ID != m.botID {
					return true
				}
			}
		}
	}
	return false
}

// cleanTriggerText is the native _clean_bot_trigger_text, the substitution
// (?i)@<username>\b[,:\-]*\s* with "" followed by str.strip(), with
// Python's rules: the username matches case-insensitively as Python's re
// does (a character matches a letter when its lower case is that letter,
// and "ı" matches "i", "ſ" matches "s"), \b means no word character
// follows, and \s and strip use Python's whitespace (internal/pytext).
// When nothing is left, or the bot's username is not known yet, the text
// stays as it was.
func (m *mapping) cleanTriggerText(text string) string {
	own := strings.ToLower(m.botUsername)
	if text == "" || own == "" {
		return text
	}
	var b strings.Builder
	matched := false
	kept := 0 // text[kept:] is not copied yet
	for i := 0; i < len(text); {
		at := strings.IndexByte(text[i:], '@')
		if at < 0 {
			break
		}
		at += i
		end, ok := matchMention(text, at+1, own)
		if !ok {
			i = at + 1
			continue
		}
		b.WriteString(text[kept:at])
		matched, kept, i = true, end, end
	}
	cleaned := text
	if matched {
		b.WriteString(text[kept:])
		cleaned = b.String()
	}
	if cleaned = pytext.Strip(cleaned); cleaned == "" {
		return text
	}
	return cleaned
}

// matchMention matches username (lower case), a word boundary, then
// [,:\-]* and Python whitespace at text[from:], and returns where the
// match ends.
func matchMention(text string, from int, username string) (int, bool) {
	i := from
	for _, want := range username {
		r, n := utf8.DecodeRuneInString(text[i:])
		if n == 0 || !pythonFoldsTo(r, want) {
			return 0, false
		}
		i += n
	}
	if r, _ := utf8.DecodeRuneInString(text[i:]); i < len(text) && pytext.IsWord(r) {
		return 0, false
	}
	for i < len(text) && (text[i] == ',' || text[i] == ':' || text[i] == '-') {
		i++
	}
	for i < len(text) {
		r, n := utf8.DecodeRuneInString(text[i:])
		if !pytext.IsSpace(r) {
			break
		}
		i += n
	}
	return i, true
}

// pythonFoldsTo reports whether r matches the lower-case pattern character
// want in a case-insensitive Python pattern: its simple lower case is want,
// or is one of the extra cases Python's re gives "i" (ı) and "s" (ſ).
func pythonFoldsTo(r, want rune) bool {
	lower := unicode.ToLower(r)
	return lower == want || want == 'i' && lower == 'ı' || want == 's' && lower == 'ſ'
}
