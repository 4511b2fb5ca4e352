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
// Routes mounts GET and POST /whatsapp/webhook: Meta's subscription
// handshake (serveVerify) and the signed events (serveWebhook, which lists
// its answers). A POST is answered 200 only once every message of it is
// stored (delivered into the relay's ledger) or deliberately dropped, so
// Meta retries whatever was not.
//
// The walk is the native adapter's (ingest): only whatsapp_business_account
// objects and messages changes; statuses are counted per tenant
// (StatusMetrics), never delivered. A message's tenant is the owner of the
// business number it reached (phone_numbers, or phone_number bindings),
// else the tenant its sender linked themselves to with "/link <code>"
// (consumed on the link desk, platform.LinkDesk); a linked sender is the
// tenant's owner and passes its DM gate. A tap on a prompt the connector
// sent goes to the tenant that posted it (promptOf), or to nobody once that
// tenant may no longer act in the conversation. Messages of one (number,
// user) pair are handled one at a time in arrival order (platform/chatorder);
// one already delivered is dropped, on every instance sharing the store
// (message, claim). Classification, the DM gate and the source are the
// native ones (classify); an attachment is re-hosted in the media store
// (attachMedia); "/stop" interrupts the session. NormalizeFixture runs the
// same code for `connector conformance events`. Every message not
// delivered is counted in Metrics.Dropped with its reason.
//
// # Egress
//
// The ops are send, prompt, react, send_media, typing and get_chat_info
// (docs/contract.md). A tenant may act on a user (chat_id = wa_id) who
// wrote to one of its numbers (the conversation, kept in the vault) or is
// linked to it, from the number of that conversation (sender); anything
// else gets the uniform decline, also a message whose number or link
// changed so while it waited for its turn (post). A message (send, prompt, react,
// send_media) fails with window_closed, unsent, when the 24-hour
// customer-service window is closed: the user last wrote to the
// conversation's number more than 24 hours ago (Meta would accept the
// message and fail it later, 131047 in a status), or Meta refuses it with
// 131047.
//
// # Limits
//
// Messages to one user are spaced (chat_per_second, platform/pace), then
// wait for the tenant's fair share of the sending number's budget
// (number_per_second) and of the app's (global_per_second), both
// platform/fairshare. A Graph rate-limit answer holds, with a backoff, the
// user (the pair limit, 131056), the tenant's sends from the number
// (130429) or all of the tenant's calls (the app and account codes), never
// another tenant's; the message is sent again within the deadline, since
// Meta did not take it. Other errors are never retried (paced).
//
// # Secrets
//
// The app secret, verify token and access token never reach logs,
// errors, results or frames; error texts are scrubbed of all three.
package whatsapp
