package discord

import (
	"encoding/json"

	"github.com/bwmarrin/discordgo"
)

// Lean views of Discord's JSON objects: only the fields ingest reads. Live
// dispatches, webhook bodies and fixture cases all decode into these, so the
// three paths share one decoder. Nullable strings decode as "".

type wireUser struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name"`
	Bot        bool   `json:"bot"`
}

type wireMember struct {
	Nick  string    `json:"nick"`
	Roles []string  `json:"roles"`
	User  *wireUser `json:"user"`
}

type wireChannel struct {
	ID       string                `json:"id"`
	Type     discordgo.ChannelType `json:"type"`
	GuildID  string                `json:"guild_id"`
	Name     string                `json:"name"`
	ParentID string                `json:"parent_id"`
	Topic    string                `json:"topic"`
	OwnerID  string                `json:"owner_id"`
	// Recipients is a DM channel's user (the bot is not listed).
	Recipients []wireUser `json:"recipients"`
}

type wireAttachment struct {
	URL         string `json:"url"`
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
}

type wireMessage struct {
	ID                string                      `json:"id"`
	ChannelID         string                      `json:"channel_id"`
	GuildID           string                      `json:"guild_id"`
	Content           string                      `json:"content"`
	Type              discordgo.MessageType       `json:"type"`
	Author            *wireUser                   `json:"author"`
	Member            *wireMember                 `json:"member"`
	WebhookID         string                      `json:"webhook_id"`
	Mentions          []wireUser                  `json:"mentions"`
	MessageReference  *discordgo.MessageReference `json:"message_reference"`
	ReferencedMessage *wireMessage                `json:"referenced_message"`
	Attachments       []wireAttachment            `json:"attachments"`
	Thread            *wireChannel                `json:"thread"`
	EditedTimestamp   string                      `json:"edited_timestamp"`
	Flags             discordgo.MessageFlags      `json:"flags"`
}

type wireInteraction struct {
	ID            string                    `json:"id"`
	ApplicationID string                    `json:"application_id"`
	Type          discordgo.InteractionType `json:"type"`
	Token         string                    `json:"token"`
	GuildID       string                    `json:"guild_id"`
	ChannelID     string                    `json:"channel_id"`
	Channel       *wireChannel              `json:"channel"`
	Member        *wireMember               `json:"member"`
	User          *wireUser                 `json:"user"`
	Data          wireInteractionData       `json:"data"`
	Message       *wireMessage              `json:"message"`
}

type wireInteractionData struct {
	Name       string         `json:"name"`
	Options    []wireOption   `json:"options"`
	CustomID   string         `json:"custom_id"`
	Components []wireModalRow `json:"components"`
}

type wireOption struct {
	Name    string                                 `json:"name"`
	Type    discordgo.ApplicationCommandOptionType `json:"type"`
	Value   json.RawMessage                        `json:"value"`
	Options []wireOption                           `json:"options"`
}

type wireModalRow struct {
	Components []struct {
		CustomID string `json:"custom_id"`
		Value    string `json:"value"`
	} `json:"components"`
}

// wireDispatch is a Gateway dispatch envelope.
type wireDispatch struct {
	T string          `json:"t"`
	D json.RawMessage `json:"d"`
}

// user returns the interaction's invoker: member.user in a guild, user in a DM.
func (in *wireInteraction) user() *wireUser {
	if in.Member != nil && in.Member.User != nil {
		return in.Member.User
	}
	return in.User
}
