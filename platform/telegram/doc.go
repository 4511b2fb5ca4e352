// Package telegram fronts one shared Telegram bot for many tenants: it
// ingests updates (webhook or long polling), normalizes them into the
// tenant-scoped MessageEvents the native Hermes Telegram adapter would
// build, and executes the gateways' outbound actions within Telegram's
// limits. It uses github.com/go-telegram/bot for the Bot API.
//
// # Ingest
//
// With webhook_url set the platform runs in webhook mode: Run registers the
// URL with setWebhook (secret_token = webhook_secret, allowed_updates,
// max_connections) and Routes mounts POST /telegram/webhook, which answers
//
//	200  ingested, or deliberately dropped (duplicate, unclaimed chat,
//	     update type not ingested): Telegram must not retry
//	400  the body is not a Bot API Update
//	401  X-Telegram-Bot-Api-Secret-Token missing or wrong (compared in
//	     constant time; the library's own check answers 200 and uses !=)
//	405  any method but POST
//	413  the body exceeds max_webhook_bytes
//	503  the relay refused the delivery, Run is not running, the store
//	     could not tell a pressed prompt's poster (authors.go; for a
//	     minute from the press's first arrival, posterWait), or another
//	     instance is handling the same update: Telegram retries, and
//	     update_id dedupe drops a copy that did get through
//
// Without webhook_url, Run long-polls getUpdates, so the connector works behind NAT; it first
// calls deleteWebhook (keeping pending updates) so a leftover webhook does
// not make getUpdates fail with 409. New does no I/O and skips the startup
// getMe: the connector starts while Telegram is unreachable, Run retries
// getMe and setWebhook/deleteWebhook with backoff (0.5 s doubling to 30 s),
// and Status says what is wrong. Status is ready once they went through;
// while polling, a failing getUpdates (including a 409 conflict) makes it
// not ready until a poll succeeds again. A 401 from Telegram (bad token)
// is terminal: Status says so and Run returns an error.
//
// Updates carry message, edited_message, channel_post, edited_channel_post
// or callback_query; others are dropped. The mapping to a SessionSource is
// the native adapter's (docs/session-key.md §4, checked against every
// Telegram case of testdata/platform_events.json through NormalizeFixture;
// normalize.go). Sources also carry is_bot and message_is_edit. Media
// messages arrive as their message_type with the caption as text; file
// URLs are not forwarded (they would contain the bot token). A callback
// query becomes an event whose text is the button's data (hp1:<prompt>:<option>
// becomes a prompt_response with text "/<option>"), sourced from the
// message the button is on and the user who pressed it; it is answered
// after delivery.
// As natively, a message's text and caption lose the bot's own @username
// (with a following , : or - and the whitespace after it), except in a
// group message that also names someone else; commands too, so
// "/model@<this bot> gpt-5" arrives as "/modelgpt-5". "/stop" (or
// "/stop@<this bot>") in a new message becomes an interrupt of the session
// it was sent in instead of an event.
//
// The tenant is the one whose chats map claims the chat id; an update from
// an unclaimed chat is dropped, never broadcast (logged at info level the
// first time per chat, at debug after that). The bot's own messages are
// dropped. A group or supergroup message then passes the tenant's group
// trigger rules (TenantConfig; a relevance policy the tenant's gateway
// declared replaces some, relevance.go), in the native adapter's order and
// with its spellings (docs/settings-parity.md); DMs, channel posts and
// button presses are not gated. Mentions are matched against the username
// getMe answered. With observe_unmentioned_group_messages, in the chats of
// group_allowed_chats, a message held back for want of a trigger is kept in
// memory (at most 20 messages or 32 KiB per chat topic, 1,024 topics) and
// delivered as the context of the next delivered message of its chat topic,
// and delivered messages other than commands name their sender in the text
// ("[name|id]") and carry no user, so the chat or topic is one session.
// Every update not delivered is counted in Metrics.Dropped with its reason
// (the drop constants of normalize.go and gate.go; a press whose prompt's
// poster the store could not look up is retried for posterWait first),
// every dropped press answered. Redeliveries are dropped by update_id (the
// last dedupe_window ids of the instance; with several instances a
// webhook's update_ids are claimed in the store too, handle). One
// chat's updates are delivered one at a time in arrival order, and
// different chats' side by side (platform/chatorder), so a slow media
// download or delivery delays its own chat only: the long poll's single
// worker hands each update its chat's turn in order, and a webhook update
// is delivered before it is answered (Telegram's Bot API server sends a
// chat's next update only after the previous one was answered). When
// polling, the next getUpdates waits until every update of the previous
// answer is handled (offset.go), the answer's updates go to the relay in
// one store write (platform.BatchSink.DeliverAll, batch.go), and a poll
// that stops confirms what it handled while it holds its lease (run.go,
// confirmHandled). A delivery the relay refuses is retried (polling) or
// answered 503 so Telegram retries (webhook).
//
// # Egress
//
// The ops are the keys of the handler table (egress.go), which the
// descriptor's supported_ops lists; docs/contract.md says what each does
// on Telegram. An action on a chat the tenant does not own gets
// contract.Declined, also one whose chat it lost while a call waited for
// its turn (paced). send splits content over 4,096 code points (split.go)
// and renders markdown as MarkdownV2 with full escaping (markdown.go),
// falling back to plain text when Telegram rejects the entities; a send
// into a topic Telegram no longer finds is retried without it. Forum
// topics the connector created or renamed keep their names in
// platform.Deps.Store (topics.go), since Telegram cannot read a topic's
// name; draft streams are draft.go's.
//
// Inbound attachments are fetched with the bot's credential into the media
// store before the update is delivered, and listed as re-host URLs
// (media.go; docs/contract.md, "Inbound attachments").
//
// # Limits
//
// Every send and edit waits for its chat's window (chat_per_second,
// default 1 per second; sends into groups also group_per_minute, default
// 20 per 60 s, as sliding windows reserved in call order), then for the
// tenant's fair share of the global budget (global_per_second, default 30,
// weighted by tenants.<tenant>.weight; platform/fairshare is the one
// policy shared with Discord). A 429 blocks the chat for retry_after (found with
// errors.As, since the library's own check fails on wrapped errors) and the
// message is retried, because Telegram did not take it. Only calls Telegram
// refused (429, rejected entities, a vanished topic) are made again; a
// network error or timeout is reported, never retried, so nothing is sent
// twice: as code unavailable (the gateway may retry), with the class of the
// failure ("connection refused", "DNS lookup failed") and never the Bot API
// server's URL or address. When a slot would come after the request's deadline (30 s by
// default) the result is rate_limited with retry_after_ms and that message
// was not sent; for a split send of which parts went out that is a success
// whose error says how many went out (platform.SendParts). typing is not paced but is skipped for a
// chat under a flood wait.
//
// # Secrets
//
// The bot token and webhook secret never reach logs, errors, results or
// frames: the library redacts the token from URLs, and every error text is
// scrubbed of both before it is logged or returned.
package telegram
