// Package httpjson writes the JSON answers of the connector's HTTP routes:
// a value, or the {"error": "..."} every route refuses a request with.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers status with v encoded as JSON, as written: < > & are not
// escaped (an error about a "<tenant>" reads as it was written); the
// answer is never HTML, and nosniff keeps a browser from reading it as such.
func Write(w http.ResponseWriter, status int, v any) {
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
