package httpjson

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriteAndError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(http.ResponseWriter)
		status int
		body   string
	}{
		{"value", func(w http.ResponseWriter) { Write(w, http.StatusCreated, map[string]int{"n": 1}) }, http.StatusCreated, `{"n":1}` + "\n"},
		{"error", func(w http.ResponseWriter) { Error(w, http.StatusConflict, `taken "x"`) }, http.StatusConflict, `{"error":"taken \"x\""}` + "\n"},
		{"not HTML-escaped", func(w http.ResponseWriter) { Error(w, http.StatusBadRequest, "want <tenant> & <gateway>") }, http.StatusBadRequest,
			`{"error":"want <tenant> & <gateway>"}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		tc.write(rec)
		if rec.Code != tc.status || rec.Body.String() != tc.body || rec.Header().Get("Content-Type") != "application/json" ||
			rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: got %d %q (headers %v), want %d %q (application/json, nosniff, no-store)", tc.name, rec.Code, rec.Body.String(), rec.Header(), tc.status, tc.body)
		}
	}
}
