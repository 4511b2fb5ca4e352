// Package httpjson writes the JSON answers of the connector's HTTP routes:
// a value, or the {"error": "..."} every route refuses a request with. No
// answer may be kept by a cache: each is one caller's, and some carry a
// secret or a code (gateway secrets, enrollment tokens, link codes).
package httpjson

import (
	"encoding/json"
	"net/http"
)

// NoStore forbids any cache to keep the answer h heads (RFC 9111 §5.2.2.5):
// the rule of every JSON answer, and of any other answer that carries a
// secret (the admin API's backup).
func NoStore(h http.Header) { h.Set("Cache-Control", "no-store") }

// Write answers status with v encoded as JSON, as written: < > & are not
// escaped (an error about a "<tenant>" reads as it was written); the
// answer is never HTML, and nosniff keeps a browser from reading it as such.
// It is never stored by a cache (NoStore).
func Write(w http.ResponseWriter, status int, v any) {
	NoStore(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Error answers status with {"error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]string{"error": msg})
}
