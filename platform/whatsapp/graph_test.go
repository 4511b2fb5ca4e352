package whatsapp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/platform/whatsapp/whatsapptest"
)

func testGraph(t *testing.T) (*graph, *whatsapptest.Server) {
	fake := whatsapptest.New(t, testToken)
	return &graph{base: fake.URL + "/" + whatsapptest.Version, token: testToken, hc: http.DefaultClient}, fake
}

func TestGraphSendAndErrors(t *testing.T) {
	g, fake := testGraph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := g.sendMessage(ctx, "1065", textMessage("447700900123", "hi", "wamid.ctx"))
	if err != nil || !strings.HasPrefix(id, "wamid.") {
		t.Fatalf("send: %q %v", id, err)
	}
	if s := fake.Sent(); len(s) != 1 || s[0].PhoneNumberID != "1065" || s[0].Context() != "wamid.ctx" || s[0].Block()["preview_url"] != true {
		t.Fatalf("sent %+v", s)
	}
	fake.CloseWindow("447700900123")
	_, err = g.sendMessage(ctx, "1065", textMessage("447700900123", "late", ""))
	var ge *GraphError
	if !errors.As(err, &ge) || ge.Code != codeReengagement || ge.Status != 400 || !strings.Contains(ge.Error(), "24 hours") {
		t.Fatalf("closed window: %v", err)
	}
	fake.Fail(whatsapptest.GraphError{Status: 400, Code: 130429, Message: "(#130429) Rate limit hit"})
	if _, limited := rateLimited(func() error { _, err := g.sendMessage(ctx, "1065", textMessage("1", "x", "")); return err }()); !limited {
		t.Fatal("130429 is not a rate limit")
	}
	bad := &graph{base: g.base, token: "wrong", hc: http.DefaultClient}
	if _, err := bad.sendMessage(ctx, "1065", textMessage("1", "x", "")); !errors.As(err, &ge) || ge.Code != codeTokenInvalid || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("bad token: %v", err)
	}
	if err := g.markRead(ctx, "1065", "wamid.in"); err != nil {
		t.Fatal(err)
	}
	if r := fake.Reads(); len(r) != 1 || !r[0].Typing || r[0].MessageID != "wamid.in" {
		t.Fatalf("reads %+v", r)
	}
}

func TestGraphMediaRoundTrip(t *testing.T) {
	g, fake := testGraph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 70_000)
	file := io.NewSectionReader(bytes.NewReader(data), 0, int64(len(data)))
	id, err := g.uploadMedia(ctx, "1065", "a \"quoted\" name.ogg", "audio/ogg; codecs=opus", file)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := fake.Media(id)
	if !bytes.Equal(up.Data, data) || up.MIME != "audio/ogg; codecs=opus" || up.Filename != `a "quoted" name.ogg` {
		t.Fatalf("upload %d bytes %q %q", len(up.Data), up.MIME, up.Filename)
	}

	// An upload sent again (here after a 307, which the client follows by
	// sending the body once more) carries the whole file.
	var redirected atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Store(true)
		http.Redirect(w, r, fake.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer front.Close()
	again := &graph{base: front.URL + "/" + whatsapptest.Version, token: testToken, hc: http.DefaultClient}
	againID, err := again.uploadMedia(ctx, "1065", "b.ogg", "audio/ogg", file)
	if up, _ := fake.Media(againID); err != nil || !redirected.Load() || !bytes.Equal(up.Data, data) {
		t.Fatalf("upload sent again (redirected %v): %d bytes, %v", redirected.Load(), len(up.Data), err)
	}
	info, err := g.lookupMedia(ctx, id)
	if err != nil || info.FileSize != int64(len(data)) {
		t.Fatalf("lookup %+v %v", info, err)
	}
	resp, err := g.download(ctx, info.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("download differs")
	}
	for _, bad := range []string{"../x", "a/b", "", strings.Repeat("1", 200), "id?x=1"} {
		if _, err := g.lookupMedia(ctx, bad); err == nil {
			t.Errorf("media id %q was looked up", bad)
		}
	}
	if _, err := g.lookupMedia(ctx, "404404"); err == nil {
		t.Error("an unknown media id was found")
	}
}

// TestGraphAnswersBounded: a non-JSON or oversized answer is an error, not
// a hang or a panic.
func TestGraphAnswersBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/messages") {
			_, _ = w.Write(bytes.Repeat([]byte("x"), 2<<20))
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer srv.Close()
	g := &graph{base: srv.URL + "/v20.0", token: testToken, hc: http.DefaultClient}
	ctx := context.Background()
	if _, err := g.sendMessage(ctx, "1", textMessage("1", "x", "")); err == nil {
		t.Fatal("garbage answer accepted")
	}
	var ge *GraphError
	if _, err := g.lookupMedia(ctx, "123"); !errors.As(err, &ge) || ge.Status != 502 || ge.Code != 0 {
		t.Fatalf("502: %v", err)
	}
}
