// Package whatsapp fronts one WhatsApp Cloud API app (Meta Graph API
// webhooks) for many tenants, each owning business phone numbers of the
// app: it verifies and ingests Meta's webhooks, normalizes messages into
// the tenant-scoped MessageEvents the native Hermes adapter
// (gateway/platforms/whatsapp_cloud.py, platform value whatsapp_cloud)
// builds, and executes the gateways' outbound actions through a small
// Graph API client of its own (graph.go), within Meta's limits.
//
// # Ingest
//
// Routes mounts GET and POST /whatsapp/webhook. GET is Meta's subscription
// handshake: hub.challenge is echoed when hub.mode is subscribe and
// hub.verify_token equals verify_token (constant time); anything else is
// 403 (400 without a challenge). POST answers
//
//	200  every message of the payload stored (delivered into the relay's
//	     ledger), or deliberately dropped (duplicate, unclaimed number,
//	     gated, status, a change other than messages): Meta must not retry
//	400  the body is not a JSON object of the webhook's shape
//	401  X-Hub-Signature-256 missing or malformed (refused before the body
//	     is read), or not the HMAC-SHA256 of the raw body under app_secret
//	     (compared in constant time); nothing is delivered
//	413  the body exceeds max_webhook_bytes (3 MiB)
//	503  a message could not be stored, or Run is not running: Meta
//	     retries the payload, and what did get through is dropped then as a
//	     duplicate
//
// The walk is the native adapter's: only object whatsapp_business_account,
// only changes of field messages; statuses (sent, delivered, read, failed)
// are counted per tenant (StatusMetrics) and never delivered, a failed one
// logged with Meta's error code. Each message's tenant is the owner of
// the business number it reached (metadata.phone_number_id: the
// phone_numbers config or admin bindings of kind phone_number); a number no
// tenant owns reaches the tenant a sender linked themselves to with
// "/link <code>" (consumed, never delivered, redeemed and answered on the
// link desk's workers: platform.LinkDesk); otherwise the
// message is dropped as unclaimed. A linked sender is the tenant's owner
// and passes its DM gate.
//
// Messages of one (business number, user) pair are handled one at a time
// in arrival order, others in parallel (platform/chatorder). A message id already
// delivered is dropped (the mark is kept in the capability vault for a
// day, so on every instance sharing the store). With several instances a
// message is also claimed while it is stored (store.Claims, atomic across
// instances, 3 minutes at most), and a copy Meta sends to another instance
// meanwhile is answered 503, so Meta retries it once the first instance is
// done and finds it delivered. Then, as
// _build_message_event_from_cloud: a tap (interactive button_reply or
// list_reply) from a sender the strict DM check refuses is claimed and
// dropped; a tap on one of the connector's prompts that is still waiting
// (prompt, below) becomes a prompt_response from the tapping user (text
// "/<option>", type command), once; a stale tap, or one of another
// integration, is an ordinary text turn with the button's title. A message
// with a chat field is group-shaped and dropped. The DM gate follows
// dm_policy (allowlist, pairing, open only with allow_all_users, disabled;
// the top-level knobs or tenants.<tenant>). The source is the native one:
// chat_type dm, chat_id = user_id = the sender's wa_id, chat_name the
// contact's profile name else the wa_id, user_name the profile name else
// null, no thread_id, scope_id or message_id; the key is
// agent:main:whatsapp_cloud:dm:<wa_id>. The event carries the wamid as
// message_id, context.id as reply_to_message_id (reply_to.is_own when the
// quoted message is the business number's, and reply_to.text when this
// instance saw the quoted message: quotes.go, as the native
// rich_sent_store), the text, template button
// text, tap title or caption (a captionless document is "[Document:
// <filename>]"; reactions, locations and contacts are empty), and
// message_type photo, video, voice, document or text. "/stop" becomes an
// interrupt of the session. An attachment is looked up (GET /{media-id}),
// downloaded with the access token and re-hosted in the media store before
// delivery (media_urls, media). NormalizeFixture runs the same code for
// `connector conformance events`. Every message not delivered is counted
// in Metrics.Dropped with its reason.
//
// # Egress
//
// The ops are send, prompt, react, send_media, typing and get_chat_info;
// edit, delete, thread_* and draft do not exist on the Cloud API and are
// unsupported_op. A tenant may act on a user (chat_id = wa_id) who wrote to
// one of its numbers (the conversation, kept in the vault for 30 days) or
// is linked to it; anything else gets the uniform decline. The op goes out
// from the number of that conversation. send converts markdown to
// WhatsApp's (format.go), splits at 4,096 code points and quotes reply_to
// with context.message_id on the first part; the result is the first
// message's wamid. prompt sends reply buttons (up to 3), a list (up to
// 10) or numbered text (more), button and row ids being hp1 tokens. react
// sends a reaction message (remove: an empty emoji). send_media uploads the
// object to /{phone_number_id}/media and sends it by id. typing marks the
// user's latest message read with the typing indicator. get_chat_info
// answers the wa_id and dm, as natively. A message Meta refuses because the
// 24-hour customer-service window is closed (131047) fails with code
// window_closed (contract.CodeWindowClosed).
//
// # Limits
//
// Messages to one user are spaced (chat_per_second), then wait for the
// tenant's fair share of the business number's budget (number_per_second,
// 80) and of the app's (global_per_second), both platform/fairshare. A
// Graph rate-limit answer holds the user with a backoff doubling from 1 s
// to 64 s and pauses what Meta throttled: the pair alone (131056), the
// number (130429), the app or account (4, 80007, 613); the message is sent
// again within the deadline, since Meta did not take it. Other errors are
// never retried.
//
// # Secrets
//
// The app secret, verify token and access token never reach logs,
// errors, results or frames; error texts are scrubbed of all three.
package whatsapp
