package discord

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/media"
	"connector/platform"
)

// attachmentRef is an entry of a message's attachments array: id is the
// index n of its files[n] part.
type attachmentRef struct {
	ID       int    `json:"id"`
	Filename string `json:"filename"`
}

// mediaMessage is the payload_json of a message with an attachment.
type mediaMessage struct {
	discordgo.MessageSend
	Attachments []attachmentRef `json:"attachments"`
}

// opSendMedia posts the object source_url names as an attachment of a new
// message (POST /channels/{id}/messages, multipart/form-data with
// payload_json and files[0], the file streamed from the media store), with
// the first 2,000 code points of content as its text and the rest as
// further messages; the first replies to reply_to. Every media_kind is an
// attachment on Discord. The result carries the attachment message's id.
func (p *Platform) opSendMedia(ctx context.Context, tenant, chatID string, a *contract.Action) contract.Result {
	ref, bad := replyRef(a)
	if bad != "" {
		return contract.Failed(contract.CodeBadRequest, bad)
	}
	obj, r, ok := p.deps.OpenMedia(ctx, platformName, tenant, a)
	if !ok {
		return r
	}
	defer obj.Close()
	pieces := []string{""} // the file alone
	if strings.TrimSpace(a.Content) != "" {
		pieces = textsplit.Split(a.Content, splitRules)
	}
	filename := cmp.Or(a.Filename, obj.Filename, "file")
	post := p.poster(ctx, discordgo.EndpointChannelMessages(chatID), nil)
	_, _, r = p.postPieces(ctx, "send_media", pieces, func(i int, piece string) (string, error) {
		if i > 0 {
			return post(i, piece)
		}
		msg := mediaMessage{MessageSend: discordgo.MessageSend{Content: piece, AllowedMentions: allowedMentions, Reference: ref}}
		msg.Attachments = []attachmentRef{{ID: 0, Filename: filename}}
		return p.postAttachment(ctx, chatID, &msg, filename, obj)
	})
	return r
}

// postAttachment sends msg with obj as files[0] and returns the message id.
// The file is read from the media store as the transport sends it, so it
// is never in memory; a retried attempt (after a 429) reads it again from
// the start (platform.NewFileUpload).
func (p *Platform) postAttachment(ctx context.Context, chatID string, msg *mediaMessage, filename string, obj *media.Object) (string, error) {
	payload, err := json.Marshal(msg)
	if err != nil {
		return "", fmt.Errorf("encode request: %w", err)
	}
	fields := func(mw *multipart.Writer) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="payload_json"`)
		h.Set("Content-Type", "application/json")
		part, _ := mw.CreatePart(h)
		_, _ = part.Write(payload)
	}
	req, err := platform.NewFileUpload(ctx, discordgo.EndpointChannelMessages(chatID), fields, "files[0]", filename, cmp.Or(obj.MIME, "application/octet-stream"), obj.Section())
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bot "+p.cfg.BotToken)
	req.Header.Set("User-Agent", p.sess.UserAgent)
	resp, err := p.sess.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		re := &discordgo.RESTError{Response: resp, ResponseBody: answer}
		var m discordgo.APIErrorMessage
		if json.Unmarshal(answer, &m) == nil {
			re.Message = &m
		}
		return "", re
	}
	var out messageAnswer
	if err := json.Unmarshal(answer, &out); err != nil {
		return "", fmt.Errorf("decode POST answer: %w", err)
	}
	return out.ID, nil
}
