package platform

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
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
