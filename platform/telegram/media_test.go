package telegram

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"connector/contract"
	"connector/media"
	"connector/platform/telegram/telegramtest"
)

// TestLongCaptionFailureNamesSendMedia: when the text of a caption too
// long for the media message cannot follow it, the result is the media's
// success (a retry would post it again), carrying its message id, with an
// error naming the send_media op and saying the caption did not follow.
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
	if !r.Success || r.Code != "" || r.MessageID == "" || !strings.HasPrefix(r.Error, "telegram send_media: ") ||
		!strings.HasSuffix(r.Error, "(the media was sent; its caption was not, or not whole)") {
		t.Fatalf("result %+v, want the photo's success, its id, and the caption's failure", r)
	}
	if n := len(e.fake.Calls("sendPhoto")); n != 1 {
		t.Fatalf("%d sendPhoto calls, want 1", n)
	}
}

// TestRetriedUpdateReusesItsRehost: the sink refuses an update with a
// document twice (the store behind it is down), and Telegram retries the
// webhook each time. The third copy is delivered with the file re-hosted
// once: each retry used to download and store the file again, and the
// copies, never delivered, filled the tenant's media quota until they
// expired, so its later attachments went without their files.
func TestRetriedUpdateReusesItsRehost(t *testing.T) {
	e := webhookEnv(t, nil)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.p.deps.Media = store
	e.fake.AddFile("DOC", "documents/r.pdf", 6, func() io.Reader { return strings.NewReader("report") })
	doc := []byte(`{"update_id":900,"message":{"message_id":9,"date":1700000000,` +
		`"chat":{"id":123456789,"type":"private","first_name":"A"},"from":{"id":123456789,"is_bot":false,"first_name":"A"},` +
		`"caption":"the report","document":{"file_id":"DOC","file_unique_id":"U1","file_name":"r.pdf","file_size":6}}}`)
	e.sink.Refuse(2)
	for i, want := range []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK} {
		if code := e.post(t, doc); code != want {
			t.Fatalf("copy %d answered %d, want %d", i+1, code, want)
		}
	}
	if d := e.sink.Next(t); len(d.Event.Media) != 1 {
		t.Fatalf("delivered with %d media, want the document", len(d.Event.Media))
	}
	if n := store.Stats().Objects; n != 1 {
		t.Fatalf("the media store holds %d objects, want the document once", n)
	}
	if n := len(e.fake.Calls("getFile")); n != 1 {
		t.Fatalf("getFile called %d times, want once", n)
	}
}

// TestLongCaptionLeavesPreviews (docs/contract.md send_media): a group
// draft stream shows its preview; a send_media into the chat, its caption
// short or over 1,024 characters, ends no stream, so the preview stays
// and the stream's next frame edits it. The long caption's text went out
// as a send, which deleted the preview as the stream's reply would.
func TestLongCaptionLeavesPreviews(t *testing.T) {
	e := newEnv(t, nil)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	e.p.deps.Media = store
	info, err := store.Put("t2", strings.NewReader("png bytes"), "image/png", "a.png")
	if err != nil {
		t.Fatal(err)
	}
	chat := contract.ID(telegramtest.ChatT2)
	for _, caption := range []string{"a short one", strings.Repeat("a", maxCaptionRunes+1)} {
		if r := e.act(t, "t2", contract.Action{Op: contract.OpDraft, ChatID: chat, DraftID: 7, Content: "thinking"}); !r.Success {
			t.Fatalf("draft frame: %+v", r)
		}
		if r := e.act(t, "t2", contract.Action{Op: contract.OpSendMedia, ChatID: chat, MediaKind: "image",
			SourceURL: store.URL(info.ID), Content: caption}); !r.Success {
			t.Fatalf("send_media with a caption of %d: %+v", len(caption), r)
		}
		if n := len(e.fake.Calls("deleteMessage")); n != 0 {
			t.Fatalf("send_media with a caption of %d deleted %d previews", len(caption), n)
		}
	}
	if n := len(e.fake.Calls("sendMessage")); n != 2 {
		t.Fatalf("%d sendMessage calls, want the preview's and the long caption's", n)
	}
}
