package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"

	"connector/internal/textsplit"
	"connector/platform"
)

// This file is the connector's whole Graph API client: the five calls the
// platform makes (send a message, mark read with the typing indicator,
// upload media, look a media id up, download its bytes), over net/http.
// No Go SDK for the WhatsApp Cloud API is kept well enough to depend on,
// and these calls are small JSON and multipart requests.

// graph calls the Graph API with the app's bearer token.
type graph struct {
	base  string // api_url + "/" + api_version
	token string
	hc    *http.Client
}

// GraphError is a Graph API error answer: {"error": {"message", "type",
// "code", "error_subcode", "error_data": {"details"}, "fbtrace_id"}}.
type GraphError struct {
	// Status is the HTTP status.
	Status  int
	Code    int
	Message string
	// Details is error_data.details, Meta's longer explanation.
	Details string
}

// Error implements error. It names the code and Meta's message, never a
// token (Meta's messages carry none; the platform scrubs them anyway).
func (e *GraphError) Error() string {
	msg := e.Message
	if e.Details != "" {
		msg += ": " + e.Details
	}
	if e.Code == 0 {
		return fmt.Sprintf("graph API HTTP %d: %s", e.Status, msg)
	}
	return fmt.Sprintf("graph error %d (HTTP %d): %s", e.Code, e.Status, msg)
}

// Graph error codes the platform acts on.
const (
	// codeReengagement: the 24-hour customer-service window is closed.
	codeReengagement = 131047
	// codeTokenInvalid: the access token expired or was revoked.
	codeTokenInvalid = 190
	// codeNumberThroughput: the business number's throughput is spent.
	codeNumberThroughput = 130429
	// codePairRate: too many messages to one user in a short time.
	codePairRate = 131056
)

// rateLimitCodes are Graph's throttling answers: application (4), WABA
// (80007), throughput per number (130429), pair rate to one user
// (131056), and the older per-user call limit (613). Meta did not take
// the message, so it may be sent again after a pause.
var rateLimitCodes = map[int]bool{4: true, 80007: true, codeNumberThroughput: true, codePairRate: true, 613: true}

// rateLimited reports whether err is a Graph throttling answer.
func rateLimited(err error) (*GraphError, bool) {
	var ge *GraphError
	return ge, errors.As(err, &ge) && rateLimitCodes[ge.Code]
}

// mediaIDPattern is what a media id may look like before it is put into a
// URL path (the native adapter's check).
var mediaIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// maxAnswerBytes bounds a Graph JSON answer read into memory.
const maxAnswerBytes = 1 << 20

// sent is the answer to POST /{phone-number-id}/messages.
type sent struct {
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
}

// sendMessage posts one /messages payload from phoneID and returns the
// message's wamid.
func (g *graph) sendMessage(ctx context.Context, phoneID string, msg any) (string, error) {
	var out sent
	if err := g.postJSON(ctx, "/"+phoneID+"/messages", msg, &out); err != nil {
		return "", err
	}
	if len(out.Messages) == 0 || out.Messages[0].ID == "" {
		return "", errors.New("graph API answered without a message id")
	}
	return out.Messages[0].ID, nil
}

// markRead marks wamid read from phoneID and shows the typing indicator
// (Meta couples both in one call; the indicator ends on the reply or after
// 25 s).
func (g *graph) markRead(ctx context.Context, phoneID, wamid string) error {
	body := map[string]any{
		"messaging_product": "whatsapp", "status": "read", "message_id": wamid,
		"typing_indicator": map[string]string{"type": "text"},
	}
	return g.postJSON(ctx, "/"+phoneID+"/messages", body, nil)
}

// uploadMedia uploads file, of type mime, to phoneID's media
// and returns the media id; the file is streamed (platform.NewFileUpload).
func (g *graph) uploadMedia(ctx context.Context, phoneID, filename, mime string, file *io.SectionReader) (string, error) {
	fields := func(mw *multipart.Writer) {
		_ = mw.WriteField("messaging_product", "whatsapp")
		_ = mw.WriteField("type", mime)
	}
	req, err := platform.NewFileUpload(ctx, g.base+"/"+phoneID+"/media", fields, "file", filename, mime, file)
	if err != nil {
		return "", err
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := g.do(req, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("graph API answered the upload without a media id")
	}
	return out.ID, nil
}

// mediaInfo is the answer to GET /{media-id}.
type mediaInfo struct {
	URL      string `json:"url"`
	MimeType string `json:"mime_type"`
	FileSize int64  `json:"file_size"`
}

// lookupMedia returns where the bytes of mediaID are (a signed URL that
// lives about 5 minutes), their type and size.
func (g *graph) lookupMedia(ctx context.Context, mediaID string) (mediaInfo, error) {
	var out mediaInfo
	if !mediaIDPattern.MatchString(mediaID) {
		return out, errors.New("malformed media id")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/"+mediaID, nil)
	if err != nil {
		return out, err
	}
	if err := g.do(req, &out); err != nil {
		return out, err
	}
	if u, err := url.Parse(out.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return out, errors.New("graph API answered the media lookup without a download URL")
	}
	return out, nil
}

// download opens the bytes behind a lookupMedia URL; Meta wants the same
// bearer token there. The caller closes the body.
func (g *graph) download(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	resp, err := g.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, graphError(resp)
	}
	return resp, nil
}

// postJSON posts body as JSON to path and decodes the answer into out (nil:
// discarded).
func (g *graph) postJSON(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return g.do(req, out)
}

// do sends req with the bearer token; a non-200 answer is a *GraphError.
func (g *graph) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+g.token)
	resp, err := g.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return graphError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(out); err != nil {
		return errors.New("graph API answer is not the expected JSON")
	}
	return nil
}

// graphError reads a non-200 answer's Graph error.
func graphError(resp *http.Response) error {
	var body struct {
		Error struct {
			Message   string `json:"message"`
			Code      int    `json:"code"`
			ErrorData struct {
				Details string `json:"details"`
			} `json:"error_data"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ge := &GraphError{Status: resp.StatusCode}
	if json.Unmarshal(raw, &body) == nil && (body.Error.Code != 0 || body.Error.Message != "") {
		ge.Code = body.Error.Code
		ge.Message, ge.Details = textsplit.Truncate(body.Error.Message, 300), textsplit.Truncate(body.Error.ErrorData.Details, 300)
	} else {
		ge.Message = http.StatusText(resp.StatusCode)
	}
	return ge
}
