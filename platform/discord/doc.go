// Package discord fronts ONE shared Discord bot for many tenants: it ingests
// Gateway events and signed interactions, normalizes them into
// tenant-scoped MessageEvents whose SessionSource gives exactly the session
// key the native Hermes Discord adapter would, keeps interaction tokens in
// the capability vault, and executes the gateways' outbound ops under
// Discord's rate limits, sharing the bot's budget fairly between tenants.
//
// # Ingest
//
// discordgo runs the Gateway connection with intents GUILDS |
// GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT (37377). Its own
// reconnect loop is off: a supervisor opens the session with a handshake
// watchdog (discordgo sets no deadline while waiting for HELLO and READY),
// treats close codes 4004, 4010-4014 as terminal (Run returns a
// *RefusedError and Status turns Terminal instead of reconnecting forever),
// resumes after other closes with jittered backoff (ReconnectMin doubling to
// ReconnectMax, reset only after StableAfter of uptime) and keeps a rolling
// 24-hour identify budget (MaxIdentifiesPerDay), checked before each new
// session against Discord's own count (GET /gateway/bot
// session_start_limit, which a restart does not forget), so a crash loop
// never burns Discord's 1,000 identifies a day.
//
// Dispatches are handled on discordgo's reader goroutine, in order. GUILD_*,
// CHANNEL_*, THREAD_* events feed a channel/thread/guild cache (ingest
// falls back to REST GET /channels/{id} or /guilds/{id} on a miss) and the
// set of threads the bot takes part in. MESSAGE_CREATE and MESSAGE_UPDATE
// take their channel's turn (platform/chatorder): each channel's messages
// are ingested in order, different channels' side by side, so a slow step
// (a REST lookup, a delivery waiting for its commit) delays its own channel
// only. Past maxIngesting messages in flight the reader waits, and Discord
// replays on resume, so nothing is lost.
//
// The tenant of a message or interaction comes from its author first
// (authors.go: a user bound to a tenant, a claimed channel's principal),
// else from the event itself: guild id -> Config.Guilds; no guild (a DM)
// -> Config.DMTenant, or dropped with a log line when that is empty.
// Events of guilds no tenant claims are dropped, never broadcast.
//
// Normalization follows docs/session-key.md §3 with the tenant's
// TenantConfig: the native gates (own and system messages, bots and
// webhooks per allow_bots, allowlists, require_mention with free-response
// channels, voice-linked channels and joined threads exempt, messages that
// mention only others), DM / group / thread mapping, names and topics, and
// auto-threading: a mention in a text or announcement channel creates a
// thread from the message (POST .../messages/{id}/threads) and keys the
// turn on it; if creation fails the turn is dropped, as the native adapter
// does. NormalizeFixture runs the same code with a fixture's context as the
// cache and the message id as the thread id. Edits (MESSAGE_UPDATE with an
// edited_timestamp) arrive as inbound events with message_is_edit true,
// never auto-thread, and belong to the thread the message started, if any.
// The bot's own mention is stripped from the text; "/stop" becomes an
// interrupt of the session instead of an inbound event. Every dropped event
// is counted in Metrics.Dropped with its reason: unclaimed, dm_no_tenant,
// principal, own_message, system_message, not_an_edit, bot_author,
// bot_not_inline_mentioned, user_not_allowed, mentions_other_bots,
// mentions_others, channel_not_allowed, channel_ignored, not_mentioned,
// group_dm, unknown_channel, auto_thread_unsupported, auto_thread_failed,
// malformed, lookup_failed; for interactions also duplicate,
// dedupe_unavailable, unsupported_interaction, overloaded,
// interaction_expired (over the Gateway, past Discord's 3 s answer window
// by its id's snowflake time: replayed after a RESUME),
// prompt_not_owned (a press of a prompt whose buttons name another
// tenant than the one it routes to: promptTag), earlier_tenant_prompt (a
// press of a prompt of an earlier tenant of the id, by the creation its
// buttons name or, without one, by its message's time, vault.Predates),
// and the
// webhook's refusals oversized (413) and rejected_<HTTP status text>; for
// /link DMs link_edit, link_rate_limited and link_shed. A guild message
// dropped as not_mentioned or mentions_others is kept as its channel's
// context (channelctx.go) unless the tenant turned channel_context off.
//
// # Interactions
//
// POST /discord/interactions (Routes) reads at most MaxInteractionBytes
// (413 above), verifies Ed25519 over X-Signature-Timestamp + body with the
// application's public key and rejects timestamps more than InteractionSkew
// away (401 for both), dedupes interaction ids (409 for a replay) and
// answers PING with PONG (autocomplete with no choices; an interaction no
// tenant takes with an ephemeral "not connected"). A command, component
// press or modal submit is processed first, within
// 2.5 s of Discord's 3: its token is stored in the vault under (tenant,
// session key, discord.interaction_token) for 15 minutes, with the
// application id and the interaction's channel as Ref ("app/channel"), and a normalized inbound event is delivered; only
// once the relay took it is the deferred response (type 5; type 6 for
// components) written, which confirms the interaction to Discord (else
// the webhook answers 503; webhook.go). The event is: a slash command as the
// command message "/name args", a component press as its custom_id (a
// prompt button "hp1:<prompt>:<option>:<tag>" as a prompt_response with text
// "/<option>"), a modal as "custom_id=value" lines. The token is never in
// anything sent to a gateway. Interactions that arrive over the Gateway
// (no endpoint URL configured) are processed the same way and acknowledged
// through the REST callback; their admission runs off the Gateway reader,
// at most maxAdmitting at once: past that one is dropped unanswered
// (overloaded, with a warning), and Discord shows its user a failure.
//
// # Egress
//
// Execute runs the ops of its handler table (send, edit, typing,
// follow_up, get_chat_info, send_media, prompt, react, delete,
// thread_create, thread_rename), which is also the descriptor's
// supported_ops. send_media (media.go) posts the object source_url names
// as files[0] of a multipart message, streamed from the media store, with
// the first piece of content as its text. prompt posts buttons whose
// custom_id is the hp1 token and its tenant's tag (prompt.go); react and delete are msgops.go;
// threads.go creates and renames threads and remembers the ones the
// connector created (docs/contract.md).
// Chat ids, message ids and reply_to must be Discord ids (digits), so no
// gateway can steer a request to another route. A chat's owner comes from
// the cache only, never from a REST call made for the gateway (owners.go):
// a chat outside the caller's tenant, another tenant's or one that does
// not exist, gets the same structured decline in the same way, so a
// decline tells nothing about which channels the bot can see; until the
// Gateway's guild snapshot has loaded every chat is answered unavailable,
// which the gateway may retry. Failure texts name the class of a network
// failure, never a URL or address. Content over 2,000
// code points is split at line or word boundaries; a cut inside a ```
// block closes it and reopens it in the next piece. send replies to
// reply_to with the first piece and returns its id; edit keeps the first
// piece and posts the rest. Mentions are limited to users and the replied
// author. follow_up resolves the token for (caller's tenant, session_key)
// and POSTs to /webhooks/{app}/{token}?wait=true; absent, expired or another
// tenant's capability answers capability_missing.
//
// # Rate limits and fair share
//
// discordgo builds and sends every REST call, on a fresh bucket each time,
// so its own limiter (which sleeps without a context and misses global 429s
// without Reset-After) never waits; the transport under its http.Client
// does the limiting under the request's context: the global budget
// (global_per_second + global_burst <= 50 requests in any second) is granted by the
// one fair-share policy (platform/fairshare: a token bucket with weighted
// round robin between tenants that have requests waiting, per-tenant FIFO
// queues, TenantConfig.Weight as the weight, an idle tenant's share going
// to those waiting; the connector's own calls form the tenant ""), then
// the per-route bucket learned from X-RateLimit-* headers. A 429 pauses its
// scope (every route when global) for retry_after and is retried while the
// deadline allows, else the op fails with rate_limited and retry_after_ms.
// Interaction callbacks and follow-ups skip the global budget, as Discord
// exempts them. Every 401, 403 and 429 answer is charged to the tenant
// whose call drew it and to the bot, over a sliding 10 minutes: a tenant
// whose answers reach TenantInvalidRequestLimit (default
// InvalidRequestLimit/8) has its calls refused alone, before they reach
// Discord, with rate_limited and the retry_after_ms until its oldest answers
// leave the window; the bot-wide breaker, the last line, refuses every REST
// call (unavailable, and Status not ready) while the bot's answers reach
// InvalidRequestLimit, below Discord's 10,000 ban threshold, and for a
// minute after a 401 to a bot-authenticated route (an interaction webhook's
// 401 is about its own token). A global 429 is charged to the bot only.
//
// # Commands
//
// A discord hello's command_manifest (HelloObserver) is registered as its
// tenant's guild commands, and the DM tenant's as global DM-only commands
// (commands.go; docs/contract.md, "Discord command manifests").
//
// Secrets (the bot token, interaction tokens) never reach logs, errors,
// metrics or frames: errors are described without their URLs, and
// discordgo's own logging is off.
package discord
