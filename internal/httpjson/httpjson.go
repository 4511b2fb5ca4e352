// Package httpjson writes the JSON answers of the connector's HTTP routes:
// a value, or the {"error": "..."} every route refuses a request with.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers status with v encoded as JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers status with {"error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]string{"error": msg})
}
