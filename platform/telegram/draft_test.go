package telegram

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/platform/telegram/telegramtest"
)

// TestPreviewSentWhileASendReplacesIt: a group draft's first frame is
// still sending its preview (sendMessage held) when the tenant's send
// into the chat looks for previews to replace: the send waits for the
// preview and deletes it. The frame used to rewrite the preview's topic
// once sent, which the send reads unlocked: a data race, reported under
// -race.
func TestPreviewSentWhileASendReplacesIt(t *testing.T) {
	var target atomic.Pointer[url.URL]
	held, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target.Load()) }}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/sendMessage") {
			first.Do(func() {
				close(held)
				<-release
			})
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e := newEnv(t, func(c *Config) { c.APIServerURL = front.URL })
	u, _ := url.Parse(e.fake.URL)
	target.Store(u)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	chat := telegramtest.ChatT2
	frame := make(chan contract.Result, 1)
	go func() {
		frame <- e.act(t, "t2", contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 7, Content: "thinking"})
	}()
	select {
	case <-held:
	case <-time.After(waitFor):
		t.Fatal("the draft frame sent no preview")
	}
	sent := make(chan contract.Result, 1)
	go func() { sent <- e.act(t, "t2", sendAction(chat, "the answer")) }()
	close(release)
	if r := <-frame; !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	if r := <-sent; !r.Success {
		t.Fatalf("send: %+v", r)
	}
	e.calls(t, "deleteMessage", 1)
}
