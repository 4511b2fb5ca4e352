package discord

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/vault"
)

// Discord's message component limits: 5 action rows of 5 buttons, labels of
// at most 80 characters.
const (
	buttonsPerRow  = 5
	maxPromptRows  = 5
	maxButtonLabel = 80
)

// buttonStyles maps the gateway's option style to Discord's button style;
// anything else is secondary (grey).
var buttonStyles = map[string]discordgo.ButtonStyle{
	contract.StylePrimary: discordgo.PrimaryButton,
	contract.StyleSuccess: discordgo.SuccessButton,
	contract.StyleDanger:  discordgo.DangerButton,
}

// opPrompt posts the question with one button per option, each carrying
// the callback token hp1:<prompt_id>:<option_id> and the posting tenant's
// promptTag as its custom_id, "<token>:<tag>". A
// question over 2,000 code points is split; the buttons ride the last
// piece, whose id is the result's message_id (the message a press names as
// prompt_message_id). A press comes back through the interactions endpoint
// as a prompt_response inbound (interaction.go).
func (p *Platform) opPrompt(ctx context.Context, tenant, chatID string, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, buttonsPerRow*maxPromptRows)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "discord prompt: "+err.Error())
	}
	ref, bad := replyRef(a)
	if bad != "" {
		return contract.Failed(contract.CodeBadRequest, bad)
	}
	pieces := textsplit.Split(a.Content, splitRules)
	_, last, r := p.postPieces(ctx, "prompt", pieces, func(i int, piece string) (string, error) {
		body := discordgo.MessageSend{Content: piece, AllowedMentions: allowedMentions}
		if i == 0 {
			body.Reference = ref
		}
		if i == len(pieces)-1 {
			body.Components = buttonRows(buttons, p.promptTag(tenant))
		}
		var m messageAnswer
		err := p.rest(ctx, "POST", discordgo.EndpointChannelMessages(chatID), &body, &m)
		return m.ID, err
	})
	if r = platform.Whole(r); !r.Success {
		return r
	}
	return contract.OK(last)
}

// promptTag names tenant and its creation (vault.Creation) on the
// buttons of the prompts it posts, as two digests of 8 characters (a
// custom_id holds 100; the buttons, which Discord's users can read, name
// neither, and keyed by the bot token, so a guessed tenant id cannot be
// confirmed from them): a press answers a prompt only for the tenant, and
// the creation of it, its buttons name (promptDrop), whatever the
// instances' clocks say.
func (p *Platform) promptTag(tenant string) string {
	return p.tagOf(tenant, "") + p.tagOf(tenant, strconv.FormatInt(vault.Creation(p.vault, tenant).UnixMicro(), 10))
}

// tagOf is a digest of tenant and of what follows it, 8 characters, keyed
// by the bot token.
func (p *Platform) tagOf(tenant, created string) string {
	mac := hmac.New(sha256.New, []byte("connector discord prompt tag\x00"+p.cfg.BotToken))
	mac.Write([]byte(tenant + "/" + created))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:6])
}

// promptPress reads a button's custom_id as a prompt's: its token's
// prompt and option ids, and the tag after it ("" on the buttons of a
// prompt posted before they carried one); ok is false for another
// integration's custom_id.
func promptPress(customID string) (promptID, optionID, tag string, ok bool) {
	token := customID
	if strings.Count(customID, ":") == 3 {
		i := strings.LastIndexByte(customID, ':')
		token, tag = customID[:i], customID[i+1:]
	}
	promptID, optionID, ok = contract.ParsePromptToken(token)
	return promptID, optionID, tag, ok
}

// promptDrop is why a press of a prompt's button with customID, on
// message messageID, is no answer of tenant's (the tenant it routes to),
// or "": its buttons name another tenant (prompt_not_owned: the chat's
// routing moved since), or another creation of tenant, an earlier tenant
// of the id deleted since (earlier_tenant_prompt; as vault.Earlier, not
// when tenant has no creation now). Buttons posted without a creation, or
// by an earlier version without a tag, are judged by the message's
// snowflake time instead (vault.Predates).
func (p *Platform) promptDrop(tenant, customID, messageID string) string {
	_, _, tag, _ := promptPress(customID)
	created := vault.Creation(p.vault, tenant)
	switch {
	case tag != "" && tag[:min(len(tag), 8)] != p.tagOf(tenant, ""):
		return "prompt_not_owned" // past here a tag holds tenant's 8 characters
	case created.IsZero() || tag == p.promptTag(tenant):
		return ""
	case tag != "" && tag[8:] != p.tagOf(tenant, strconv.FormatInt(time.Time{}.UnixMicro(), 10)):
		return "earlier_tenant_prompt"
	}
	if posted, err := discordgo.SnowflakeTimestamp(messageID); err == nil && vault.Predates(p.vault, tenant, posted) {
		return "earlier_tenant_prompt"
	}
	return ""
}

// buttonRows lays buttons out in action rows of buttonsPerRow, each
// button's custom_id its token and tag.
func buttonRows(buttons []contract.PromptButton, tag string) []discordgo.MessageComponent {
	rows := make([]discordgo.MessageComponent, 0, (len(buttons)+buttonsPerRow-1)/buttonsPerRow)
	var row *discordgo.ActionsRow
	for i, b := range buttons {
		if i%buttonsPerRow == 0 {
			row = &discordgo.ActionsRow{}
			rows = append(rows, row)
		}
		row.Components = append(row.Components, discordgo.Button{
			Style: cmp.Or(buttonStyles[b.Style], discordgo.SecondaryButton), Label: textsplit.TruncateRunes(b.Label, maxButtonLabel), CustomID: b.Token + ":" + tag,
		})
	}
	return rows
}

// replyRef is the message reference for an action's reply_to (nil when
// none), or the bad_request text when reply_to is not a message id.
func replyRef(a *contract.Action) (*discordgo.MessageReference, string) {
	if a.ReplyTo == "" {
		return nil, ""
	}
	if !isSnowflake(string(a.ReplyTo)) {
		return nil, "reply_to is not a Discord message id"
	}
	no := false
	return &discordgo.MessageReference{MessageID: string(a.ReplyTo), ChannelID: string(a.ChatID), FailIfNotExists: &no}, ""
}
