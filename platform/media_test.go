package platform

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/media"
)

// TestNewFileUpload: the body is the fields then the file, its length is
// announced, GetBody gives the whole body again, and a filename cannot add
// a header to the file's part.
func TestNewFileUpload(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10_000)
	file := io.NewSectionReader(bytes.NewReader(data), 0, int64(len(data)))
	fields := func(mw *multipart.Writer) { _ = mw.WriteField("kind", "photo") }
	name := "a \"b\".png\r\nContent-Type: text/html"
	req, err := NewFileUpload(context.Background(), "http://example.test/up", fields, "file", name, "image/png", file)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := io.ReadAll(req.Body)
	again, _ := req.GetBody()
	second, _ := io.ReadAll(again)
	if int64(len(first)) != req.ContentLength || !bytes.Equal(first, second) {
		t.Fatalf("body %d bytes, again %d, Content-Length %d", len(first), len(second), req.ContentLength)
	}
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		t.Fatalf("Content-Type %q", req.Header.Get("Content-Type"))
	}
	form, err := multipart.NewReader(bytes.NewReader(first), params["boundary"]).ReadForm(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	files := form.File["file"]
	if form.Value["kind"][0] != "photo" || len(files) != 1 || len(files[0].Header) != 2 ||
		files[0].Header.Get("Content-Type") != "image/png" || strings.ContainsAny(files[0].Filename, "\r\n") {
		t.Fatalf("form %v, file parts %+v", form.Value, files)
	}
	f, _ := files[0].Open()
	got, _ := io.ReadAll(f)
	if !bytes.Equal(got, data) {
		t.Fatalf("file %d bytes, want %d", len(got), len(data))
	}
}

// TestRehostsReuseWithinHalfALife: a file re-hosted for a message not
// delivered is reused by the message's retries while the media store
// holds it for at least half its life, for its tenant alone; past that,
// or once the message was delivered, the file is re-hosted afresh.
func TestRehostsReuseWithinHalfALife(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC))
	st, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", TTL: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := NewRehosts(clk)
	stored := 0
	rehost := func(tenant string) string {
		t.Helper()
		info, err := r.Rehost(st, tenant, "F1", func() (media.Info, error) {
			stored++
			return st.Put(tenant, strings.NewReader("bytes"), "text/plain", "f.txt")
		})
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	first := rehost("t1")
	if again := rehost("t1"); again != first || stored != 1 {
		t.Fatalf("a retry got %s (%d stored), want %s again", again, stored, first)
	}
	if other := rehost("t2"); other == first || stored != 2 {
		t.Fatalf("another tenant's message got %s (%d stored), want a re-host of its own", other, stored)
	}
	clk.Advance(30 * time.Minute)
	if late := rehost("t1"); late == first || stored != 3 {
		t.Fatalf("a retry half a life later got %s (%d stored), want a fresh re-host", late, stored)
	}
	r.Delivered("t1", "F1")
	rehost("t1")
	if stored != 4 {
		t.Fatalf("after the delivery %d stored, want a fresh re-host", stored)
	}
}
