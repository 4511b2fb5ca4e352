package slack

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"connector/internal/nativecfg"
)

// This file owns how a tenant's Slack knobs are read and checked: the
// native adapter's names (plugins/platforms/slack/adapter.py, its YAML to
// SLACK_* bridge) and spellings (internal/nativecfg). docs/settings-parity.md
// lists every knob; TestSlackSettingsParity checks each row.

// TenantConfig holds the native Slack adapter's knobs that decide which of
// a tenant's messages become turns, how they are keyed and how replies are
// posted, and the tenant's fair-share weight. Lists may be YAML lists, bare
// scalars or comma-separated strings; booleans YAML booleans or
// true/false, 1/0, yes/no, on/off.
type TenantConfig struct {
	// RequireMention makes a channel or group-DM message need a mention of
	// the bot (or a mention_patterns match, or a thread the bot takes part
	// in) (slack.require_mention, SLACK_REQUIRE_MENTION). Default true.
	RequireMention *bool `yaml:"require_mention"`
	// StrictMention makes every message outside free-response channels
	// need an explicit mention, even in threads the bot takes part in
	// (slack.strict_mention). Default false.
	StrictMention *bool `yaml:"strict_mention"`
	// ThreadRequireMention makes thread replies need a mention, even in
	// free-response channels (slack.thread_require_mention). Default false.
	ThreadRequireMention *bool `yaml:"thread_require_mention"`
	// IgnoreOtherUserMentions drops a message whose first token mentions
	// someone other than the bot, unless it also mentions the bot
	// (slack.ignore_other_user_mentions). Default false.
	IgnoreOtherUserMentions *bool `yaml:"ignore_other_user_mentions"`
	// DisableDMs drops DMs and group DMs (slack.disable_dms). Default false.
	DisableDMs *bool `yaml:"disable_dms"`
	// FreeResponseChannels need no mention (slack.free_response_channels):
	// channel ids. Default none.
	FreeResponseChannels []string `yaml:"free_response_channels"`
	// RequireMentionChannels always need a mention, over require_mention:
	// false and free_response_channels (slack.require_mention_channels).
	// Default none.
	RequireMentionChannels []string `yaml:"require_mention_channels"`
	// AllowedChannels, when set, drops channel and group-DM messages of
	// other channels, even when they mention the bot
	// (slack.allowed_channels). Default none (every channel).
	AllowedChannels []string `yaml:"allowed_channels"`
	// IgnoredChannels drops every message of these channels; "*" drops all
	// (slack.ignored_channels). Default none.
	IgnoredChannels []string `yaml:"ignored_channels"`
	// MentionPatterns are regular expressions that count as a mention,
	// searched case-insensitively in the text (slack.mention_patterns).
	// One string is one pattern. Default none.
	MentionPatterns []string `yaml:"mention_patterns"`
	// AllowBots admits messages of other bots: "none" (default), "mentions"
	// (only those mentioning the bot) or "all" (slack.allow_bots,
	// SLACK_ALLOW_BOTS). The bot's own messages are always dropped.
	AllowBots string `yaml:"allow_bots"`
	// APIHumanUsers are user ids whose Web API posts (an app_id and no
	// client_msg_id) count as human (slack.api_human_users). Default none.
	APIHumanUsers []string `yaml:"api_human_users"`
	// ReplyInThread keys a top-level channel message on its own ts (its
	// reply starts a thread under it); false keys the channel per user and
	// replies flat (slack.reply_in_thread). A YAML boolean only. Default
	// true.
	ReplyInThread *bool `yaml:"reply_in_thread"`
	// DMTopLevelThreadsAsSessions keys a top-level DM on its own ts (a new
	// session per top-level DM); false keys the DM channel
	// (slack.dm_top_level_threads_as_sessions). Default true.
	DMTopLevelThreadsAsSessions *bool `yaml:"dm_top_level_threads_as_sessions"`
	// ReplyBroadcast also posts the first part of a thread reply to the
	// channel (slack.reply_broadcast). Default false.
	ReplyBroadcast *bool `yaml:"reply_broadcast"`
	// UnfurlLinks is sent with every chat.postMessage when set
	// (slack.unfurl_links). Default: unset, Slack's own default.
	UnfurlLinks *bool `yaml:"unfurl_links"`
	// UnfurlMedia is sent with every chat.postMessage when set to false
	// (slack.unfurl_media). Default: unset, Slack's own default (true).
	UnfurlMedia *bool `yaml:"unfurl_media"`
	// AllowedUsers, when set, admits only these user ids ("*" admits
	// everyone) (SLACK_ALLOWED_USERS). Default: none, everyone (the tenant's
	// gateway applies its own allowlist).
	AllowedUsers []string `yaml:"allowed_users"`
	// AllowAllUsers admits everyone whatever AllowedUsers says
	// (SLACK_ALLOW_ALL_USERS). Default: slack.allow_all_users.
	AllowAllUsers *bool `yaml:"allow_all_users"`
	// ReactionTriggers makes reactions start turns: a reaction becomes a
	// message "reaction:<added|removed>:<emoji>" from the reactor, in the
	// reacted-to message's thread, past the mention gates
	// (slack.reaction_triggers, SLACK_REACTION_TRIGGERS). true (also "all",
	// "*", an empty list) for every reaction to the bot's own messages (in
	// a chat held by author link, those it posted there for the tenant); a
	// list of reaction names for those reactions to any message. Default:
	// off, reactions start nothing.
	ReactionTriggers *[]string `yaml:"reaction_triggers"`
	// ReactionTriggerTarget sends the turns reactions start to one chat of
	// the tenant instead: a channel id (a top-level turn there) or
	// "<channel>:<ts>" (that thread; the ts as Slack spells it: 10 digits,
	// a dot, 6 digits) (slack.reaction_trigger_target). A
	// target another tenant owns drops the turn. Default: the reacted-to
	// message's thread.
	ReactionTriggerTarget string `yaml:"reaction_trigger_target"`
	// Weight is the tenant's share of each workspace's Web API budget
	// relative to the other tenants there, and of an instance's durable
	// intake (at least half of it); a tenant's largest weight on any
	// platform is also its share of an instance's session-owner writes
	// (relay, docs/security.md). Default 1; at most 1,000,000.
	Weight int `yaml:"weight"`
}

// UnmarshalYAML reads a tenant's knobs as the native adapter reads them.
// Unknown keys are errors.
func (tc *TenantConfig) UnmarshalYAML(node *yaml.Node) error {
	return nativecfg.ReadKnobs(node, tc, "slack tenant", tenantKnobs)
}

// tenantKnobs reads each YAML key of TenantConfig
// (TestSlackTenantKnobsCoverFields keeps it in step with the yaml tags).
// The native flags count true, 1, yes and on as true.
var tenantKnobs = map[string]nativecfg.Knob[TenantConfig]{
	"require_mention":                  nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.RequireMention }, true),
	"strict_mention":                   nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.StrictMention }, true),
	"thread_require_mention":           nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.ThreadRequireMention }, true),
	"ignore_other_user_mentions":       nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.IgnoreOtherUserMentions }, true),
	"disable_dms":                      nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.DisableDMs }, true),
	"dm_top_level_threads_as_sessions": nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.DMTopLevelThreadsAsSessions }, true),
	"reply_broadcast":                  yamlBoolKnob(func(tc *TenantConfig) **bool { return &tc.ReplyBroadcast }),
	"reply_in_thread":                  yamlBoolKnob(func(tc *TenantConfig) **bool { return &tc.ReplyInThread }),
	"unfurl_links":                     nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.UnfurlLinks }, true),
	"unfurl_media":                     nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.UnfurlMedia }, true),
	"allow_all_users":                  nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.AllowAllUsers }, true),
	"free_response_channels":           nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.FreeResponseChannels }),
	"require_mention_channels":         nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.RequireMentionChannels }),
	"allowed_channels":                 nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedChannels }),
	"ignored_channels":                 nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.IgnoredChannels }),
	"api_human_users":                  nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.APIHumanUsers }),
	"allowed_users":                    nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedUsers }),
	"mention_patterns":                 nativecfg.PatternsKnob(func(tc *TenantConfig) *[]string { return &tc.MentionPatterns }),
	"allow_bots":                       func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.AllowBots) },
	"reaction_triggers":                readReactionTriggers,
	"reaction_trigger_target":          func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.ReactionTriggerTarget) },
	"weight":                           func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.Weight) },
}

// yamlBoolKnob reads a knob the native adapter tests for truth as it is
// (reply_in_thread, reply_broadcast): a YAML boolean. A string such as
// "false" is refused: natively it is a non-empty string, so true.
func yamlBoolKnob(field func(*TenantConfig) **bool) nativecfg.Knob[TenantConfig] {
	return func(tc *TenantConfig, n *yaml.Node) error {
		if n.Tag != "!!null" && !nativecfg.IsYAML11Bool(n) {
			return fmt.Errorf("%q: want a YAML boolean (the native adapter reads any other value by its truth, so the string %q is true)", n.Value, n.Value)
		}
		v, err := nativecfg.Flag(n, true) // null: unset
		*field(tc) = v
		return err
	}
}

// reactionWords are reaction_triggers' words for on (every reaction to
// the bot's messages) and off, as the native _slack_reaction_triggers
// reads them.
var (
	reactionAll = map[string]bool{"true": true, "1": true, "yes": true, "on": true, "all": true, "*": true}
	reactionOff = map[string]bool{"": true, "false": true, "0": true, "no": true, "off": true}
	reactionSep = regexp.MustCompile(`[,\s]+`)
)

// readReactionTriggers reads reaction_triggers as the native adapter
// does: null or false is off; true is every reaction to the bot's
// messages; a list names reactions (an empty one is every reaction); a
// string is a word for on or off, else reaction names split on commas and
// spaces. Names lose surrounding colons (":tada:" is "tada").
func readReactionTriggers(tc *TenantConfig, n *yaml.Node) error {
	names := func(items []string) *[]string {
		out := []string{}
		for _, it := range items {
			if name := strings.Trim(strings.TrimSpace(it), ":"); name != "" {
				out = append(out, name)
			}
		}
		return &out
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		tc.ReactionTriggers = nil
	case nativecfg.IsYAML11Bool(n):
		tc.ReactionTriggers = nil
		if on, _ := nativecfg.ParseFlag(n.Value, true); on { // a YAML 1.1 boolean word: cannot fail
			tc.ReactionTriggers = &[]string{}
		}
	case n.Kind == yaml.SequenceNode:
		items, err := nativecfg.List(n)
		if err != nil {
			return err
		}
		tc.ReactionTriggers = names(items)
	case n.Kind == yaml.ScalarNode:
		text := strings.TrimSpace(nativecfg.Bridged(n))
		switch lower := strings.ToLower(text); {
		case reactionOff[lower]:
			tc.ReactionTriggers = nil
		case reactionAll[lower]:
			tc.ReactionTriggers = &[]string{}
		default:
			tc.ReactionTriggers = names(reactionSep.Split(text, -1))
		}
	default:
		return fmt.Errorf("want true, false, a list of reaction names or a comma-separated string")
	}
	return nil
}

// AllowBots values.
const (
	AllowBotsNone     = "none"
	AllowBotsMentions = "mentions"
	AllowBotsAll      = "all"
)

// policy is one tenant's TenantConfig in the form ingest and egress read.
type policy struct {
	requireMention, strictMention, threadRequireMention bool
	ignoreOtherUserMentions, disableDMs                 bool
	replyInThread, dmTopLevelThreads, replyBroadcast    bool
	unfurlLinks, unfurlMedia                            *bool
	allowBots                                           string
	freeResponse, requireMentionIn, allowedChannels     map[string]bool // allowedChannels nil: every channel
	ignored                                             map[string]bool
	ignoreAll                                           bool
	apiHumans                                           map[string]bool
	allowedUsers                                        map[string]bool // nil: everyone
	patterns                                            []*regexp.Regexp
	// reactions is nil when reactions start no turns; an empty set when
	// every reaction to the bot's messages does, else the names that do
	// on any message.
	reactions map[string]bool
	// reactionTarget and reactionThread are reaction_trigger_target's
	// channel and thread ("" for none).
	reactionTarget, reactionThread string
}

// newPolicy checks tc and builds its policy; allowAll is
// slack.allow_all_users. The error starts with the YAML key.
func newPolicy(tc TenantConfig, allowAll bool) (*policy, error) {
	pol := &policy{
		requireMention:          nativecfg.FlagOr(tc.RequireMention, true),
		strictMention:           nativecfg.FlagOr(tc.StrictMention, false),
		threadRequireMention:    nativecfg.FlagOr(tc.ThreadRequireMention, false),
		ignoreOtherUserMentions: nativecfg.FlagOr(tc.IgnoreOtherUserMentions, false),
		disableDMs:              nativecfg.FlagOr(tc.DisableDMs, false),
		replyInThread:           nativecfg.FlagOr(tc.ReplyInThread, true),
		dmTopLevelThreads:       nativecfg.FlagOr(tc.DMTopLevelThreadsAsSessions, true),
		replyBroadcast:          nativecfg.FlagOr(tc.ReplyBroadcast, false),
		unfurlLinks:             tc.UnfurlLinks,
		unfurlMedia:             tc.UnfurlMedia,
	}
	switch v := strings.ToLower(strings.TrimSpace(tc.AllowBots)); v {
	case "":
		pol.allowBots = AllowBotsNone
	case AllowBotsNone, AllowBotsMentions, AllowBotsAll:
		pol.allowBots = v
	default:
		return nil, fmt.Errorf("allow_bots: %q is not one of none, mentions, all (the native adapter reads it as none)", tc.AllowBots)
	}
	sets := []struct {
		key  string
		in   []string
		out  *map[string]bool
		want *regexp.Regexp
	}{
		{"free_response_channels", tc.FreeResponseChannels, &pol.freeResponse, channelIDPattern},
		{"require_mention_channels", tc.RequireMentionChannels, &pol.requireMentionIn, channelIDPattern},
		{"allowed_channels", tc.AllowedChannels, &pol.allowedChannels, channelIDPattern},
		{"ignored_channels", tc.IgnoredChannels, &pol.ignored, channelIDPattern},
		{"api_human_users", tc.APIHumanUsers, &pol.apiHumans, userIDPattern},
		{"allowed_users", tc.AllowedUsers, &pol.allowedUsers, userIDPattern},
	}
	for _, s := range sets {
		set, err := idSet(s.key, s.in, s.want)
		if err != nil {
			return nil, err
		}
		*s.out = set
	}
	pol.ignoreAll = pol.ignored["*"]
	if pol.allowedUsers["*"] || nativecfg.FlagOr(tc.AllowAllUsers, allowAll) {
		pol.allowedUsers = nil
	}
	if rt := tc.ReactionTriggers; rt != nil {
		pol.reactions = map[string]bool{}
		for _, name := range *rt {
			pol.reactions[name] = true
		}
	}
	if target := strings.TrimSpace(tc.ReactionTriggerTarget); target != "" {
		channel, thread, _ := strings.Cut(target, ":")
		channel, thread = strings.TrimSpace(channel), strings.TrimSpace(thread)
		switch {
		case !channelIDPattern.MatchString(channel):
			return nil, fmt.Errorf("reaction_trigger_target: %q is not a Slack id", channel)
		case thread != "" && !messageTS.MatchString(thread):
			return nil, fmt.Errorf("reaction_trigger_target: %q is not a message ts", thread)
		}
		pol.reactionTarget, pol.reactionThread = channel, thread
	}
	var err error
	if pol.patterns, err = nativecfg.CompilePatterns(tc.MentionPatterns); err != nil {
		return nil, err
	}
	return pol, nil
}

// idSet reads list knob key (split on commas, trimmed, as the native reader
// does) into a set; an entry that is not an id of the shape want (or "*",
// which only ignored_channels and allowed_users read) could never match and
// is refused. Nil when empty.
func idSet(key string, items []string, want *regexp.Regexp) (map[string]bool, error) {
	entries := nativecfg.Split(items)
	if len(entries) == 0 {
		return nil, nil
	}
	set := make(map[string]bool, len(entries))
	for _, e := range entries {
		switch {
		case e == "*" && (key == "ignored_channels" || key == "allowed_users"):
		case e == "*":
			return nil, fmt.Errorf("%s: \"*\" is not a wildcard in this list: the native adapter would match no channel", key)
		case strings.HasPrefix(e, "<") || strings.HasPrefix(e, "#"):
			return nil, fmt.Errorf("%s: %q is mention or name syntax; write the bare id (the native adapter compares ids only)", key, e)
		case !want.MatchString(e):
			return nil, fmt.Errorf("%s: %q is not a Slack id, so it never matches", key, e)
		}
		set[e] = true
	}
	return set, nil
}

// defaultPolicy is the native defaults, for tenants without settings.
func defaultPolicy(allowAll bool) *policy {
	pol, _ := newPolicy(TenantConfig{}, allowAll) // the zero config is valid
	return pol
}

// mentionPattern reports whether text matches one of the tenant's
// mention_patterns.
func (pol *policy) mentionPattern(text string) bool {
	return slices.ContainsFunc(pol.patterns, func(re *regexp.Regexp) bool { return re.MatchString(text) })
}

// admits reports whether user may start a turn (the allowlist; the
// native runner's check).
func (pol *policy) admits(user string) bool {
	return pol.allowedUsers == nil || pol.allowedUsers[user]
}

// refusal is why the tenant refuses a slash command or prompt press of
// user (dm: in a 1:1 DM), "" when it takes it: disable_dms, then
// allowed_users, as the native adapter authorizes them.
func (pol *policy) refusal(user string, dm bool) string {
	switch {
	case dm && pol.disableDMs:
		return dropDMsDisabled
	case !pol.admits(user):
		return dropUserNotAllowed
	}
	return ""
}
