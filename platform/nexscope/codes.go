package nexscope

import "github.com/coder/websocket"

// Close codes the relay sends. 1008 and 4009-4014 are the protocol's own;
// 4015-4017 cover cases the protocol leaves to the relay.
const (
	// CloseUnauthorized (1008): token missing or wrong (no error frame, to
	// prevent enumeration), or version_mismatch (after the error frame).
	CloseUnauthorized websocket.StatusCode = websocket.StatusPolicyViolation
	// CloseGoingAway (1001): the connector is shutting down.
	CloseGoingAway websocket.StatusCode = websocket.StatusGoingAway
	// CloseNameTaken (4009): the name is already online in the room.
	CloseNameTaken websocket.StatusCode = 4009
	// CloseHeartbeatTimeout (4010): two consecutive WebSocket pings went
	// unanswered, or the name probe of a new connection with the same name
	// did (the ghost is replaced). Logged only; no error frame.
	CloseHeartbeatTimeout websocket.StatusCode = 4010
	// CloseTooLarge (4011): one message exceeded MaxPayload (after a
	// msg_too_large error frame).
	CloseTooLarge websocket.StatusCode = 4011
	// CloseInvalidName (4012): the name fails ^[a-zA-Z0-9_-]{1,32}$.
	CloseInvalidName websocket.StatusCode = 4012
	// CloseTooManyErrors (4013): the tenth missing_from / from_mismatch /
	// missing_to on one connection.
	CloseTooManyErrors websocket.StatusCode = 4013
	// CloseTransferStalled (4014): the sender's file-end did not arrive within
	// TransferTimeout of its file-start.
	CloseTransferStalled websocket.StatusCode = 4014
	// CloseRoomFull (4015): the room already has MaxUsers members (after a
	// room_full error frame).
	CloseRoomFull websocket.StatusCode = 4015
	// CloseSlowConsumer (4016): the member's send queue overflowed
	// SendQueueBytes + MaxPayload; its backlog is dropped. No error frame (it
	// would queue behind the backlog). A member stuck in one write for
	// WriteTimeout is dropped without a close frame instead.
	CloseSlowConsumer websocket.StatusCode = 4016
	// CloseUnknownRoom (4017): /ws/{room} names no configured room (after an
	// unknown_room error frame; only sent to clients with a valid token).
	CloseUnknownRoom websocket.StatusCode = 4017
)

// Error codes of {"type":"error","code":...} frames.
const (
	ErrVersionMismatch    = "version_mismatch"
	ErrInvalidName        = "invalid_name"
	ErrNameTaken          = "name_taken"
	ErrRoomFull           = "room_full"
	ErrUnknownRoom        = "unknown_room"
	ErrMissingFrom        = "missing_from"
	ErrFromMismatch       = "from_mismatch"
	ErrMissingTo          = "missing_to"
	ErrUnknownType        = "unknown_type"
	ErrBadJSON            = "bad_json"
	ErrMsgTooLarge        = "msg_too_large"
	ErrTransferBusy       = "transfer_busy"
	ErrTransferIncomplete = "transfer_incomplete"
	ErrBadFileEnd         = "bad_file_end"
	// ErrBadFileStart: file-start without an attachment object whose size is
	// a non-negative integer. The frame is dropped; no lock is taken.
	ErrBadFileStart = "bad_file_start"
	// ErrFileTooLarge: attachment.size exceeds MaxFile. The frame is dropped.
	ErrFileTooLarge = "file_too_large"
	// ErrSizeMismatch: the chunks overran attachment.size, or file-end came
	// before all of it arrived. The transfer is aborted: recipients get
	// transfer_incomplete, the lock is released, no ack.
	ErrSizeMismatch = "size_mismatch"
	// ErrUnexpectedBinary: a binary frame from a member that holds no
	// transfer lock. The frame is dropped.
	ErrUnexpectedBinary = "unexpected_binary"
)

// strikeLimit is how many missing_from / from_mismatch / missing_to errors
// one connection may cause; the last one closes it with 4013.
const strikeLimit = 10

// retryAfterMs is the retry hint of transfer_busy.
const retryAfterMs = 2000
