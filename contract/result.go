package contract

// Result is the result object of an outbound_result frame. success is the
// universal field; the gateway reads the others per op (hermes-wire.md §7.3).
type Result struct {
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
	// Code is a machine-readable failure class; CodeEgressDeclined is the one
	// the gateway itself acts on.
	Code      string `json:"code,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	// ThreadID with AutoThreadName on a send means "routed into a thread the
	// connector just created"; ThreadID alone answers thread_create.
	ThreadID       string    `json:"thread_id,omitempty"`
	AutoThreadName string    `json:"auto_thread_name,omitempty"`
	ChatInfo       *ChatInfo `json:"chat_info,omitempty"`
	// RetryAfterMS hints when a rate-limited op may succeed (informational).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Ambiguous marks a failure after which the op may still have been
	// applied (the connector shut down while the platform call ran), as
	// the gateway marks its own timeouts; never set on a decline.
	Ambiguous bool `json:"ambiguous,omitempty"`
}

// ChatInfo answers get_chat_info.
type ChatInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Failure codes carried in Result.Code.
const (
	// CodeEgressDeclined: the target is not an approved destination for this
	// connection (another tenant's chat, session or capability, or a platform
	// this connection does not front). The gateway treats it as final.
	CodeEgressDeclined = "egress_declined"
	// CodeUnsupportedOp: the op is unknown or not advertised in supported_ops.
	CodeUnsupportedOp = "unsupported_op"
	// CodeBadRequest: the action is malformed or misses a required field.
	CodeBadRequest = "bad_request"
	// CodeCapabilityMissing: follow_up found no live capability in the vault.
	CodeCapabilityMissing = "capability_missing"
	// CodeRateLimited: the platform's limits did not free up before the
	// request's deadline.
	CodeRateLimited = "rate_limited"
	// CodePlatformError: the platform refused or failed the call.
	CodePlatformError = "platform_error"
	// CodeNameChanged: thread_rename's guard (only_if_current_name or
	// only_if_connector_created) found the thread renamed by someone else,
	// or not created by the connector; nothing was changed.
	CodeNameChanged = "name_changed"
	// CodeWindowClosed: WhatsApp Cloud refused the message because the
	// 24-hour customer-service window is closed (the user last wrote more
	// than 24 hours ago); only a template could reach them. Not retryable.
	CodeWindowClosed = "window_closed"
	// CodeUnavailable: the platform is not connected or unreachable (also
	// when a chat's owner could not be looked up), or the connector is
	// shutting down. The gateway may retry.
	CodeUnavailable = "unavailable"
)

// Declined is the structured decline. Its text is deliberately uniform so it
// never reveals whose chat the target is.
func Declined(platform string) Result {
	return Result{
		Success: false,
		Code:    CodeEgressDeclined,
		Error:   platform + " egress declined: target is not an approved destination for this connection",
	}
}

// Failed returns a failure result with a code and a message. The message must
// not contain secrets.
func Failed(code, msg string) Result {
	return Result{Success: false, Code: code, Error: msg}
}

// OK returns a success result carrying messageID (which may be empty).
func OK(messageID string) Result {
	return Result{Success: true, MessageID: messageID}
}
