package nexscope

import (
	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/wsconn"
)

// Close is how the relay ends a connection: a WebSocket close status and
// the reason sent with it. Each predefined value has one meaning; two values
// share a status where the protocol gives one status two causes (1008,
// 4010). A Close is an error.
type Close = contract.Close

// The closes the relay sends. 1001, 1008 and 4009-4014 are the protocol's
// own; 4015-4017 cover cases the protocol leaves to the relay. Those of a
// refused handshake follow an error frame whose code is their reason.
var (
	// CloseUnauthorized (1008, no reason): the token is missing or wrong. No
	// error frame and no reason, to prevent enumeration.
	CloseUnauthorized = Close{Code: 1008}
	// CloseVersionMismatch (1008): v is not 1.
	CloseVersionMismatch = Close{Code: 1008, Reason: string(CodeVersionMismatch)}
	// CloseGoingAway (1001): the connector is shutting down.
	CloseGoingAway = Close{Code: 1001, Reason: "shutting down"}
	// CloseNameTaken (4009): the name is already online in the room.
	CloseNameTaken = Close{Code: 4009, Reason: string(CodeNameTaken)}
	// CloseHeartbeatTimeout (4010): two consecutive WebSocket pings went
	// unanswered. Logged only; no error frame.
	CloseHeartbeatTimeout = Close{Code: 4010, Reason: "heartbeat_timeout"}
	// CloseGhostReplaced (4010): the member did not answer the name probe of
	// a new connection with the same name, which takes its place (see
	// replaceGhost). Logged only; no error frame.
	CloseGhostReplaced = Close{Code: 4010, Reason: "replaced by a new connection"}
	// CloseTooLarge (4011): one message exceeded MaxPayload (after a
	// msg_too_large error frame).
	CloseTooLarge = Close{Code: 4011, Reason: string(CodeMsgTooLarge)}
	// CloseInvalidName (4012): the name fails ^[a-zA-Z0-9_-]{1,32}$.
	CloseInvalidName = Close{Code: 4012, Reason: string(CodeInvalidName)}
	// CloseTooManyErrors (4013): the strikeLimit-th missing_from /
	// from_mismatch / missing_to on one connection (after its error frame).
	CloseTooManyErrors = Close{Code: 4013, Reason: "too many errors"}
	// CloseTransferStalled (4014): the sender's file-end did not arrive within
	// TransferTimeout of its file-start (recipients get transfer_incomplete).
	CloseTransferStalled = Close{Code: 4014, Reason: string(CodeTransferIncomplete)}
	// CloseRoomFull (4015): the room already has MaxUsers members.
	CloseRoomFull = Close{Code: 4015, Reason: string(CodeRoomFull)}
	// CloseSlowConsumer (4016): the member's send queue overflowed
	// SendQueueBytes + MaxPayload; its backlog is dropped. No error frame (it
	// would queue behind the backlog). A member stuck in one write for
	// WriteTimeout is dropped without a close frame instead.
	CloseSlowConsumer = Close{Code: 4016, Reason: "slow consumer"}
	// CloseUnknownRoom (4017): /ws/{room} names no configured room (only sent
	// to clients with a valid token).
	CloseUnknownRoom = Close{Code: 4017, Reason: string(CodeUnknownRoom)}

	// Several instances (docs/nexscope.md, "Many instances"): each means
	// "reconnect"; the load balancer may send the client to any instance.

	// CloseRoomMoved (1012, service restart): the instance that hosted the
	// room (its home) died, shut down or lost the room's lease; the room,
	// with its file lock, starts again on another instance.
	CloseRoomMoved = Close{Code: 1012, Reason: "room moved to another instance"}
	// CloseFramesLost (1011): a frame between this instance and the room's
	// home was lost (pub/sub is at most once); the member is closed rather
	// than see frames missing or out of order.
	CloseFramesLost = Close{Code: 1011, Reason: "frames lost between relay instances"}
	// CloseNoHome (1013, try again later): no instance answered for the
	// room within the join timeout (its home is changing).
	CloseNoHome = Close{Code: 1013, Reason: "room unavailable, try again"}
)

// closeWith ends ws with c (wsconn.Drop: without a close handshake).
func closeWith(ws *websocket.Conn, c Close) {
	if c == wsconn.Drop {
		_ = ws.CloseNow()
		return
	}
	_ = ws.Close(websocket.StatusCode(c.Code), c.Reason)
}

// ErrorCode is the code of an {"type":"error","code":...} frame: a wire
// value the client switches on, not a Go error.
type ErrorCode string

// Error codes the relay sends. Those of a refused handshake come before its
// close; the others leave the connection open unless their comment says so.
const (
	// CodeVersionMismatch: v is given and is not 1 (then close 1008).
	CodeVersionMismatch ErrorCode = "version_mismatch"
	// CodeInvalidName: the name fails ^[a-zA-Z0-9_-]{1,32}$ (then close 4012).
	CodeInvalidName ErrorCode = "invalid_name"
	// CodeNameTaken: the name is online in the room and its holder answered
	// the name probe, or it is the bot's (then close 4009).
	CodeNameTaken ErrorCode = "name_taken"
	// CodeRoomFull: the room has MaxUsers members (then close 4015).
	CodeRoomFull ErrorCode = "room_full"
	// CodeUnknownRoom: /ws/{room} names no configured room (then close 4017).
	CodeUnknownRoom ErrorCode = "unknown_room"
	// CodeMissingFrom: a msg, file-start or file-end without from. A strike.
	CodeMissingFrom ErrorCode = "missing_from"
	// CodeFromMismatch: from is not the member's own name. A strike.
	CodeFromMismatch ErrorCode = "from_mismatch"
	// CodeMissingTo: to is not an array of names. A strike.
	CodeMissingTo ErrorCode = "missing_to"
	// CodeUnknownType: a text frame whose type the relay does not take.
	CodeUnknownType ErrorCode = "unknown_type"
	// CodeBadJSON: a text frame that is not a JSON object.
	CodeBadJSON ErrorCode = "bad_json"
	// CodeMsgTooLarge: a frame over MaxPayload (then close 4011).
	CodeMsgTooLarge ErrorCode = "msg_too_large"
	// CodeTransferBusy: file-start while another transfer holds the room's
	// lock; the frame carries retryAfterMs, and the refused stream is
	// dropped quietly.
	CodeTransferBusy ErrorCode = "transfer_busy"
	// CodeTransferIncomplete: to the recipients of a file-start, when its
	// transfer was aborted or stalled.
	CodeTransferIncomplete ErrorCode = "transfer_incomplete"
	// CodeBadFileEnd: file-end whose msgId is not the transfer in progress.
	CodeBadFileEnd ErrorCode = "bad_file_end"
	// CodeBadFileStart: file-start without an attachment object whose size is
	// a non-negative integer. The frame is dropped; no lock is taken.
	CodeBadFileStart ErrorCode = "bad_file_start"
	// CodeFileTooLarge: attachment.size exceeds MaxFile. The frame is dropped.
	CodeFileTooLarge ErrorCode = "file_too_large"
	// CodeSizeMismatch: the chunks overran attachment.size, or file-end came
	// before all of it arrived. The transfer is aborted: recipients get
	// transfer_incomplete, the lock is released, no ack.
	CodeSizeMismatch ErrorCode = "size_mismatch"
	// CodeUnexpectedBinary: a binary frame from a member that holds no
	// transfer lock. The frame is dropped.
	CodeUnexpectedBinary ErrorCode = "unexpected_binary"
	// CodeUndelivered: several instances; the msg or file (its file-start's
	// msgId) was not answered by the room's home before the member's
	// connection to it ended (the home died, moved or shut down, or frames
	// were lost): it may have reached some recipients, or none. Sent by the
	// member's own instance just before it closes the member with 1012,
	// 1011 or 1001.
	CodeUndelivered ErrorCode = "undelivered"
)

// strikeLimit is how many missing_from / from_mismatch / missing_to errors
// one connection may cause; the last one closes it with 4013.
const strikeLimit = 10

// retryAfterMs is the retry hint of transfer_busy.
const retryAfterMs = 2000
