package discordtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
)

// Attachment is a file part of a multipart request (files[n]), hashed as
// it streamed in, never kept whole.
type Attachment struct {
	// Field is the part's name, e.g. "files[0]".
	Field       string
	Filename    string
	ContentType string
	Size        int64
	SHA256      string // lowercase hex
}

// fileField is Discord's name for the n-th file part.
var fileField = regexp.MustCompile(`^files\[[0-9]+\]$`)

// readRequestBody returns a JSON body, or for multipart/form-data (a message
// with attachments) its payload_json and its files, as Discord reads them:
// a file part must be named files[n] and carry a filename.
func readRequestBody(r *http.Request) ([]byte, []Attachment, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return readBody(r), nil, nil
	}
	var payload []byte
	var files []Attachment
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return payload, files, nil
		}
		if err != nil {
			return nil, nil, err
		}
		switch {
		case part.FormName() == "payload_json":
			if payload, err = io.ReadAll(io.LimitReader(part, 1<<20)); err != nil {
				return nil, nil, err
			}
		case fileField.MatchString(part.FormName()) && part.FileName() != "":
			h := sha256.New()
			n, err := io.Copy(h, part)
			if err != nil {
				return nil, nil, err
			}
			files = append(files, Attachment{Field: part.FormName(), Filename: part.FileName(),
				ContentType: part.Header.Get("Content-Type"), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		default:
			return nil, nil, fmt.Errorf("unexpected form part %q", part.FormName())
		}
	}
}
