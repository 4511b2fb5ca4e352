package telegram

import (
	"fmt"
	"maps"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"connector/internal/nativecfg"
)

// This file owns how a tenant's group-trigger knobs are read and checked:
// the spellings the native Telegram adapter accepts for them (YAML lists,
// comma-separated strings, JSON list literals, bare numbers read as YAML
// 1.1 does, the TELEGRAM_* boolean spellings). docs/settings-parity.md
// lists every knob and special value; TestTelegramSettingsParity checks
// each row.

// TenantConfig holds the native Telegram adapter's knobs that decide which
// of a tenant's group messages become turns (gate.go applies them in the
// native order). Values are read as the native adapter reads config.yaml's
// telegram section and its TELEGRAM_* variables: lists may be YAML lists,
// bare numbers, comma-separated strings or JSON list literals ('["-100",
// "-200"]'); booleans may be YAML booleans or true/false, 1/0, yes/no,
// on/off. DMs and channels are never gated, as natively.
type TenantConfig struct {
	// RequireMention makes a group message need a trigger: a mention of
	// the bot (@username, a text mention, /command@bot), a reply to the
	// bot, or a MentionPatterns match; free-response chats and topics are
	// exempt (telegram.require_mention, TELEGRAM_REQUIRE_MENTION). Default
	// false.
	RequireMention *bool `yaml:"require_mention"`
	// MentionPatterns are regular expressions that also trigger: searched
	// case-insensitively in the text or caption (telegram.mention_patterns).
	// A list, or one string that is one pattern; a pattern Go's regexp
	// cannot compile (Python-only syntax such as lookarounds) is refused.
	// Default none.
	MentionPatterns []string `yaml:"mention_patterns"`
	// FreeResponseChats need no trigger (telegram.free_response_chats,
	// TELEGRAM_FREE_RESPONSE_CHATS): chat ids. Default none.
	FreeResponseChats []string `yaml:"free_response_chats"`
	// FreeResponseTopics need no trigger (telegram.free_response_topics,
	// TELEGRAM_FREE_RESPONSE_TOPICS): "<chat id>:<thread id>" entries, where
	// thread 1 is a forum's General topic and also every message of a group
	// without topics. Default none.
	FreeResponseTopics []string `yaml:"free_response_topics"`
	// AllowedChats, when set, drops group messages of other chats, except
	// an explicit mention of the bot when GuestMode is on
	// (telegram.allowed_chats, TELEGRAM_ALLOWED_CHATS). Default none (every
	// chat).
	AllowedChats []string `yaml:"allowed_chats"`
	// AllowedTopics, when set, drops group messages in other threads; a
	// message without a thread (a forum's General topic, a group without
	// topics) is thread 1 (telegram.allowed_topics, TELEGRAM_ALLOWED_TOPICS).
	// Thread ids, compared as written. Default none (every thread).
	AllowedTopics []string `yaml:"allowed_topics"`
	// IgnoredThreads drops group messages in these threads
	// (telegram.ignored_threads, TELEGRAM_IGNORED_THREADS); entries are read
	// as numbers (" +007 " is 7). Default none.
	IgnoredThreads []string `yaml:"ignored_threads"`
	// GuestMode lets an explicit mention of the bot through in groups
	// outside AllowedChats (telegram.guest_mode, TELEGRAM_GUEST_MODE).
	// Default false.
	GuestMode *bool `yaml:"guest_mode"`
	// BotsRequireMention makes another bot's group message need an
	// explicit mention of this bot, even in reply to it, unless the chat or
	// topic is free-response (telegram.bots_require_mention,
	// TELEGRAM_BOTS_REQUIRE_MENTION). Default false.
	BotsRequireMention *bool `yaml:"bots_require_mention"`
	// ExclusiveBotMentions drops a group message whose explicit @…bot
	// mentions all name other bots, free-response chats included
	// (telegram.exclusive_bot_mentions, TELEGRAM_EXCLUSIVE_BOT_MENTIONS).
	// Default true.
	ExclusiveBotMentions *bool `yaml:"exclusive_bot_mentions"`
	// ObserveUnmentionedGroupMessages applies in the chats of
	// GroupAllowedChats (those also in AllowedChats, when that is set): a
	// group message RequireMention holds back is kept and delivered as
	// context of the next delivered message of its chat and topic, and
	// delivered messages other than commands carry their sender in the
	// text ("[name|id]") instead of the source, so the chat or topic shares
	// one session (telegram.observe_unmentioned_group_messages,
	// TELEGRAM_OBSERVE_UNMENTIONED_GROUP_MESSAGES). Default false.
	ObserveUnmentionedGroupMessages *bool `yaml:"observe_unmentioned_group_messages"`
	// IngestUnmentionedGroupMessages is the older name of
	// ObserveUnmentionedGroupMessages, read only when that is unset.
	IngestUnmentionedGroupMessages *bool `yaml:"ingest_unmentioned_group_messages"`
	// GroupAllowedChats are the chats the tenant's gateway authorizes as a
	// whole (telegram.group_allowed_chats, TELEGRAM_GROUP_ALLOWED_CHATS). The
	// connector reads them only to scope ObserveUnmentionedGroupMessages;
	// authorizing users stays the gateway's. Default none.
	GroupAllowedChats []string `yaml:"group_allowed_chats"`
	// Weight is the tenant's share of the bot's global send budget
	// (GlobalPerSecond) relative to other tenants, and of the chat topics
	// whose observed messages an instance keeps (docs/security.md); a
	// tenant's largest weight on any platform is also its share of an
	// instance's session-owner writes (relay, docs/security.md). Default
	// 1; at most 1,000,000.
	Weight int `yaml:"weight"`
}

// UnmarshalYAML reads a tenant's knobs as the native adapter reads them
// (nativecfg.ReadKnobs). Unknown keys are errors.
func (tc *TenantConfig) UnmarshalYAML(node *yaml.Node) error {
	return nativecfg.ReadKnobs(node, tc, "telegram tenant", tenantKnobs)
}

// tenantKnobs reads each YAML key of TenantConfig
// (TestTelegramTenantKnobsCoverFields keeps it in step with the yaml tags).
// Every TELEGRAM_* boolean counts true, 1, yes and on as true.
var tenantKnobs = map[string]nativecfg.Knob[TenantConfig]{
	"require_mention":                    nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.RequireMention }, true),
	"guest_mode":                         nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.GuestMode }, true),
	"bots_require_mention":               nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.BotsRequireMention }, true),
	"exclusive_bot_mentions":             nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.ExclusiveBotMentions }, true),
	"observe_unmentioned_group_messages": nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.ObserveUnmentionedGroupMessages }, true),
	"ingest_unmentioned_group_messages":  nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.IngestUnmentionedGroupMessages }, true),
	"free_response_chats":                nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.FreeResponseChats }),
	"free_response_topics":               nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.FreeResponseTopics }),
	"allowed_chats":                      nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedChats }),
	"allowed_topics":                     nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedTopics }),
	"ignored_threads":                    nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.IgnoredThreads }),
	"group_allowed_chats":                nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.GroupAllowedChats }),
	"mention_patterns":                   nativecfg.PatternsKnob(func(tc *TenantConfig) *[]string { return &tc.MentionPatterns }),
	"weight":                             func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.Weight) },
}

// policy is one tenant's TenantConfig in the form the gate reads.
type policy struct {
	requireMention       bool
	guestMode            bool
	botsRequireMention   bool
	exclusiveBotMentions bool
	observe              bool
	patterns             []*regexp.Regexp
	freeChats            map[int64]bool
	freeTopics           map[topicKey]bool
	allowedChats         map[int64]bool // nil: every chat
	allowedTopics        map[int]bool   // nil: every thread
	ignoredThreads       map[int]bool
	observeChats         map[int64]bool
}

// defaultPolicy is the native defaults, for tenants without settings.
var defaultPolicy = &policy{exclusiveBotMentions: true}

// newPolicy checks tc and builds its policy; the error starts with the YAML
// key.
func newPolicy(tc TenantConfig) (*policy, error) {
	pol := &policy{
		requireMention:       nativecfg.FlagOr(tc.RequireMention, false),
		guestMode:            nativecfg.FlagOr(tc.GuestMode, false),
		botsRequireMention:   nativecfg.FlagOr(tc.BotsRequireMention, false),
		exclusiveBotMentions: nativecfg.FlagOr(tc.ExclusiveBotMentions, true),
		// observe_unmentioned_group_messages, else its older name.
		observe: nativecfg.FlagOr(tc.ObserveUnmentionedGroupMessages, nativecfg.FlagOr(tc.IngestUnmentionedGroupMessages, false)),
	}
	var err error
	if pol.freeChats, err = chatList("free_response_chats", tc.FreeResponseChats); err != nil {
		return nil, err
	}
	if pol.allowedChats, err = chatList("allowed_chats", tc.AllowedChats); err != nil {
		return nil, err
	}
	groupAllowed, err := chatList("group_allowed_chats", tc.GroupAllowedChats)
	if err != nil {
		return nil, err
	}
	// Observed context is shared at chat scope, so it needs chats the
	// gateway authorizes as a whole, and responds in.
	pol.observeChats = groupAllowed
	if pol.allowedChats != nil {
		maps.DeleteFunc(pol.observeChats, func(chat int64, _ bool) bool { return !pol.allowedChats[chat] })
	}
	if pol.freeTopics, err = setOf("free_response_topics", tc.FreeResponseTopics, freeTopic); err != nil {
		return nil, err
	}
	allowedTopic := func(e string) (int, error) { return topicThreadID(e, false) }
	if pol.allowedTopics, err = setOf("allowed_topics", tc.AllowedTopics, allowedTopic); err != nil {
		return nil, err
	}
	if pol.ignoredThreads, err = setOf("ignored_threads", tc.IgnoredThreads, pythonThreadID); err != nil {
		return nil, err
	}
	if pol.patterns, err = nativecfg.CompilePatterns(tc.MentionPatterns); err != nil {
		return nil, err
	}
	return pol, nil
}

// setOf reads list knob key as the native adapter does
// (nativecfg.DecodeList) into the set of its entries parsed; nil when empty.
func setOf[K comparable](key string, items []string, parse func(string) (K, error)) (map[K]bool, error) {
	entries, err := nativecfg.DecodeList(items)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var set map[K]bool
	for _, e := range entries {
		k, err := parse(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", key, e, err)
		}
		if set == nil {
			set = make(map[K]bool, len(entries))
		}
		set[k] = true
	}
	return set, nil
}

// chatList reads a list of chat ids, compared as written, as natively: an
// entry that is not a chat id in its canonical spelling (or is "*", which
// is no wildcard here) could never match and is refused. Nil when empty.
func chatList(key string, items []string) (map[int64]bool, error) {
	entries, err := nativecfg.DecodeList(items)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	chats := make(map[int64]bool, len(entries))
	for _, e := range entries {
		chat, err := parseChatID(e)
		if err != nil {
			if e == "*" {
				return nil, fmt.Errorf("%s: \"*\" is not a wildcard in this list: the native adapter would match no chat", key)
			}
			return nil, fmt.Errorf("%s: %q: %w (the native adapter compares chat ids as written, so this never matches)", key, e, err)
		}
		chats[chat] = true
	}
	return chats, nil
}

// freeTopic parses a free_response_topics entry "<chat id>:<thread id>",
// both compared as written.
func freeTopic(e string) (topicKey, error) {
	chatText, threadText, ok := strings.Cut(e, ":")
	if !ok {
		return topicKey{}, fmt.Errorf("want <chat id>:<thread id>")
	}
	chat, err := parseChatID(chatText)
	if err != nil {
		return topicKey{}, err
	}
	thread, err := topicThreadID(threadText, false)
	if err != nil {
		return topicKey{}, err
	}
	return topicKey{chat: chat, thread: thread}, nil
}

// pythonThreadID parses a thread id as Python's int() does: surrounding
// space, a sign, leading zeros and single underscores between digits are
// allowed. Only a positive id can match a thread.
func pythonThreadID(s string) (int, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(t, "+")
	if strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") {
		return 0, fmt.Errorf("want a positive integer")
	}
	return topicThreadID(strings.ReplaceAll(t, "_", ""), true)
}
