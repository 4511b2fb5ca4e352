package telegramtest

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// File is an uploaded file field of a recorded call.
type File struct {
	// Name is the part's filename.
	Name string
	// Size and SHA256 (lowercase hex) describe the bytes received.
	Size   int64
	SHA256 string
}

// hostedFile is a file getFile knows (AddFile).
type hostedFile struct {
	path string
	size int64
	open func() io.Reader
}

// AddFile makes getFile answer fileID with file_path path and file_size
// size, and GET /file/bot<token>/<path> serve what open returns (it is
// called per download, so large files need not be held in memory).
func (s *Server) AddFile(fileID, path string, size int64, open func() io.Reader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[fileID] = hostedFile{path: path, size: size, open: open}
}

// getFile answers getFile from the files AddFile registered.
func (s *Server) getFile(form map[string]string) (any, *Failure) {
	id := form["file_id"]
	f, ok := s.files[id]
	if !ok {
		return nil, &Failure{Code: 400, Description: "Bad Request: invalid file_id"}
	}
	return map[string]any{"file_id": id, "file_unique_id": "u-" + id, "file_size": f.size, "file_path": f.path}, nil
}

// serveFile serves a registered file's bytes to the bot's token only.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("tok") != "bot"+s.token {
		writeError(w, Failure{Code: http.StatusUnauthorized, Description: "Unauthorized"})
		return
	}
	path := r.PathValue("path")
	s.mu.Lock()
	var found *hostedFile
	for _, f := range s.files {
		if f.path == path {
			found = &f
			break
		}
	}
	s.mu.Unlock()
	if found == nil {
		writeError(w, Failure{Code: http.StatusNotFound, Description: "Not Found"})
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(found.size, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, io.LimitReader(found.open(), found.size))
}

// mediaFields maps each media method to its file field and the message key
// its answer carries.
var mediaFields = map[string]string{
	"sendPhoto": "photo", "sendVoice": "voice", "sendAudio": "audio", "sendVideo": "video", "sendDocument": "document",
}

// sendMedia answers a media method: the file field must be an upload; the
// message carries the caption and a file object of the method's kind.
// Called with s.mu held.
func (s *Server) sendMedia(method string, form map[string]string, files map[string]File) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	if f := threadCheck(form); f != nil {
		return nil, f
	}
	field := mediaFields[method]
	up := files[field]
	if up.Size == 0 {
		return nil, &Failure{Code: 400, Description: "Bad Request: there is no " + field + " in the request"}
	}
	if form["parse_mode"] == "MarkdownV2" && form["caption"] != "" {
		if _, err := ParseMarkdownV2(form["caption"]); err != nil {
			return nil, &Failure{Code: 400, Description: "Bad Request: " + err.Error()}
		}
	}
	s.nextID++
	fileObj := map[string]any{"file_id": "f" + strconv.Itoa(s.nextID), "file_unique_id": "u" + strconv.Itoa(s.nextID), "file_size": up.Size}
	msg := map[string]any{"message_id": s.nextID, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"}}
	if c := form["caption"]; c != "" {
		msg["caption"] = c
	}
	if field == "photo" {
		msg[field] = []any{fileObj}
	} else {
		msg[field] = fileObj
	}
	return msg, nil
}
