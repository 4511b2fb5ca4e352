package slack

import (
	"strings"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/session"
)

// This file turns a slash command into the event the native adapter
// builds (_handle_slash_command, _slash_command_text, _slash_thread_id).
// Its response_url is a capability: it goes to the vault (kind
// slack.response_url, under the command's session key) for follow_up,
// never to the gateway.

// hermesSubcommands are the first words of "/hermes <word> args" that
// name a gateway command, mapped as slack_subcommand_map() maps them: the
// stock gateway commands (hermes_cli's command registry), and compact as
// /compress. The registry also holds plugin and skill commands the
// connector cannot know; "/hermes <one of those>" arrives as free text.
var hermesSubcommands = func() map[string]string {
	m := map[string]string{"compact": "/compress"}
	for _, c := range strings.Fields(`help new reset stop status egress resume sessions model debug restart update
		verbose commands approve deny queue steer bg btw reasoning usage platforms platform profile whoami
		compress retry undo title personality`) {
		m[c] = "/" + c
	}
	return m
}()

// slashText is _slash_command_text: a native slash keeps Slack's raw
// argument text; "/hermes <subcommand> args" maps the subcommand, other
// text after /hermes is a plain question, and a bare /hermes is /help.
func slashText(command, text string) string {
	name := strings.TrimSpace(strings.TrimLeft(command, "/"))
	if name != "hermes" && name != "" {
		if text == "" {
			return "/" + name
		}
		return "/" + name + " " + text
	}
	legacy := strings.TrimSpace(text)
	words := strings.Fields(legacy)
	if len(words) > 0 {
		if mapped, ok := hermesSubcommands[words[0]]; ok {
			if rest := strings.TrimSpace(legacy[strings.Index(legacy, words[0])+len(words[0]):]); rest != "" {
				return mapped + " " + rest
			}
			return mapped
		}
	}
	if legacy == "" {
		return "/help"
	}
	return legacy
}

// slashSource is the source of a slash command (or a prompt press, which
// adds its names and message_id) in channel of workspace team, and so of
// the session its replies (slashReply) belong to: no chat_name, user_name
// or message_id, and a DM only in a D channel (a group DM's command is
// group), so its key differs from a message's in the same chat, as
// natively.
func slashSource(channel, user, thread, team string) session.Source {
	src := session.Source{
		Platform: platformName,
		ChatID:   channel,
		ChatType: session.ChatTypeGroup,
		UserID:   session.StrOrNull(user),
		ThreadID: session.StrOrNull(thread),
		ScopeID:  team,
	}
	if strings.HasPrefix(channel, "D") {
		src.ChatType = session.ChatTypeDM
	}
	return src
}

// slashCommand is a slash command and the thread anchor its payload may
// carry (thread_ts, else message_ts).
type slashCommand struct {
	slack.SlashCommand
	thread string
}

// slashEvent builds the event of a slash command.
func slashEvent(c *slashCommand) contract.Event {
	text := slashText(c.Command, c.Text)
	ev := contract.Event{Text: text, MessageType: "text", Source: slashSource(c.ChannelID, c.UserID, c.thread, c.TeamID)}
	if strings.HasPrefix(text, "/") {
		ev.MessageType = "command"
	}
	return ev
}
