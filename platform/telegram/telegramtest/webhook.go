package telegramtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// SecretHeader is the header Telegram puts the webhook secret_token in.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// PostUpdate delivers one Update to a webhook URL the way Telegram does
// (POST, application/json, the secret header when secret is not empty) and
// returns the HTTP status.
func PostUpdate(ctx context.Context, client *http.Client, url, secret string, update []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(update))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set(SecretHeader, secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
