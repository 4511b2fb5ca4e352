package discord

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/session"
)

// interaction normalizes an application command, component press or modal
// submit as the native adapter's _build_slash_event does
// (docs/session-key.md §3.2). The token is not read here: it never leaves
// the webhook handler except into the vault.
func (n *normalizer) interaction(ctx context.Context, in *wireInteraction) (*turn, error) {
	u := in.user()
	if u == nil || u.ID == "" || in.ChannelID == "" || in.ID == "" {
		return nil, drop("malformed")
	}
	ch, err := n.interactionChannel(ctx, in)
	if err != nil {
		return nil, err
	}
	t := &turn{}
	t.ev.MessageID = in.ID // unique per interaction: the gateway's replay dedupe key
	switch in.Type {
	case discordgo.InteractionApplicationCommand:
		t.ev.Text = commandText(&in.Data)
		t.ev.MessageType = contract.MessageCommand
		t.interrupt = isStop(t.ev.Text)
	case discordgo.InteractionMessageComponent:
		t.ev.Text, t.ev.MessageType = in.Data.CustomID, contract.MessageText
		// A button of a prompt op becomes its answer; another
		// integration's custom_id stays text, as the contract keeps it.
		if promptID, optionID, _, ok := promptPress(in.Data.CustomID); ok {
			pr := &contract.PromptResponse{PromptID: promptID, OptionID: optionID}
			if in.Message != nil {
				pr.PromptMessageID = in.Message.ID
			}
			t.ev.PromptResponse = pr
			t.ev.Text, t.ev.MessageType = "/"+optionID, contract.MessageCommand
		}
	case discordgo.InteractionModalSubmit:
		t.ev.Text, t.ev.MessageType = modalText(&in.Data), contract.MessageText
	default:
		return nil, drop("unsupported_interaction")
	}
	src := &t.ev.Source
	src.Platform = platformName
	src.ChatID = in.ChannelID
	src.UserID = session.Str(u.ID)
	src.UserName = session.Str(memberName(in.Member, u))
	switch {
	case ch.Type == discordgo.ChannelTypeDM:
		src.ChatType = session.ChatTypeDM
		src.ChatName = session.Str("")
		return t, nil
	case ch.Type == discordgo.ChannelTypeGroupDM:
		return nil, drop("group_dm")
	}
	guildID := cmp.Or(in.GuildID, ch.GuildID)
	guild := n.guildName(ctx, guildID)
	src.ScopeID = guildID
	src.ChatName = session.Str(guild + " / #" + ch.Name)
	if ch.isThread() {
		src.ChatType = session.ChatTypeThread
		src.ThreadID = session.Str(ch.ID)
		src.ParentChatID = ch.ParentID
		if parent := n.parentOf(ctx, ch); parent.isForum() {
			src.ChatTopic = session.StrOrNull(parent.Topic)
		}
		return t, nil
	}
	src.ChatType = session.ChatTypeGroup
	src.ChatTopic = channelTopic(ch)
	return t, nil
}

// interactionChannel merges the partial channel an interaction carries with
// the cache (which knows the topic); without either, a guild-less
// interaction is a DM.
func (n *normalizer) interactionChannel(ctx context.Context, in *wireInteraction) (chanInfo, error) {
	if in.Channel == nil || in.Channel.ID == "" {
		return n.channelOf(ctx, in.ChannelID, in.GuildID)
	}
	ch := infoFrom(in.Channel)
	if cached, err := n.look.channel(ctx, ch.ID); err == nil {
		ch.Topic = cmp.Or(ch.Topic, cached.Topic)
		ch.Name = cmp.Or(ch.Name, cached.Name)
		ch.ParentID = cmp.Or(ch.ParentID, cached.ParentID)
		ch.GuildID = cmp.Or(ch.GuildID, cached.GuildID)
	}
	return ch, nil
}

// commandText renders a slash command as the message the user would have
// typed: "/name sub value value".
func commandText(d *wireInteractionData) string {
	var b strings.Builder
	b.WriteByte('/')
	b.WriteString(d.Name)
	appendOptions(&b, d.Options, 0)
	return b.String()
}

// maxOptionDepth bounds option nesting (Discord allows group > sub > value).
const maxOptionDepth = 3

func appendOptions(b *strings.Builder, opts []wireOption, depth int) {
	if depth >= maxOptionDepth {
		return
	}
	for i := range opts {
		o := &opts[i]
		switch o.Type {
		case discordgo.ApplicationCommandOptionSubCommand, discordgo.ApplicationCommandOptionSubCommandGroup:
			b.WriteByte(' ')
			b.WriteString(o.Name)
			appendOptions(b, o.Options, depth+1)
		default:
			if v := optionValue(o.Value); v != "" {
				b.WriteByte(' ')
				b.WriteString(v)
			}
		}
	}
}

// optionValue is a string option's text or a number's or boolean's JSON
// spelling.
func optionValue(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	return string(raw)
}

// modalText renders a modal submit as "custom_id=value" lines.
func modalText(d *wireInteractionData) string {
	var b strings.Builder
	for _, row := range d.Components {
		for _, c := range row.Components {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.CustomID)
			b.WriteByte('=')
			b.WriteString(c.Value)
		}
	}
	if b.Len() == 0 {
		return d.CustomID
	}
	return b.String()
}
