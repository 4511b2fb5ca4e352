package telegram

import (
	"strings"
	"testing"

	"connector/contract"
	"connector/media"
	"connector/platform/telegram/telegramtest"
)

// TestLongCaptionFailureNamesSendMedia: when the text of a caption too
// long for the media message cannot follow it, the failure names the
// send_media op, says the media went out, and carries its message id.
func TestLongCaptionFailureNamesSendMedia(t *testing.T) {
	e := newEnv(t, nil)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	e.p.deps.Media = store
	info, err := store.Put("t1", strings.NewReader("png bytes"), "image/png", "a.png")
	if err != nil {
		t.Fatal(err)
	}
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	r := e.act(t, "t1", contract.Action{Op: contract.OpSendMedia, ChatID: "123456789", MediaKind: "image",
		SourceURL: store.URL(info.ID), Content: strings.Repeat("a", maxCaptionRunes+1)})
	if r.Success || r.MessageID == "" || !strings.HasPrefix(r.Error, "telegram send_media: ") ||
		!strings.HasSuffix(r.Error, "(the media was sent; its caption was not)") {
		t.Fatalf("result %+v, want a send_media failure that carries the photo's id", r)
	}
	if n := len(e.fake.Calls("sendPhoto")); n != 1 {
		t.Fatalf("%d sendPhoto calls, want 1", n)
	}
}
