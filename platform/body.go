package platform

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
)

// bodyPool recycles webhook body buffers; maxPooledBody keeps unusually
// large ones out of it.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 64 << 10

// ReadBody reads the body of a platform's webhook request, at most limit
// bytes, into a pooled buffer that release gives back once body is no
// longer used. When the body cannot be read it answers the request itself,
// 413 with the text tooLarge past limit (counted in m as platform's dropped
// "oversized") or 400, and ok is false.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, tooLarge string, m Metrics, platform string) (body []byte, release func(), ok bool) {
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= maxPooledBody {
			bodyPool.Put(buf)
		}
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		release()
		if tooBig := new(http.MaxBytesError); errors.As(err, &tooBig) {
			m.Dropped(platform, "oversized")
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
		}
		return nil, nil, false
	}
	return buf.Bytes(), release, true
}
