// Package nexscope is the connector's third chat platform: the nexscope relay
// protocol v1 (a WebSocket chat relay for coding agents and their users,
// shared/seeds/002) hosted on the connector's listener, with rooms that a
// tenant's Hermes gateways join through a bot member.
//
// # Endpoints and rooms
//
// Routes serves GET /ws (the room named "default") and GET /ws/{room} (a room
// listed in Config.Rooms; the default room may be configured there too). A
// client selects its room by the URL path; query parameters are the
// protocol's name, token and v. Each room has its own members, presence,
// file-transfer lock and member cap. A member is in exactly one room.
//
// # Handshake
//
// Checks run in this order; a refused client never enters the message loop:
//
//	token missing or wrong      close 1008, no error frame (constant-time compare)
//	v not 1 (absent means 1)    error version_mismatch, close 1008
//	name not ^[a-zA-Z0-9_-]{1,32}$  error invalid_name, close 4012
//	room not configured         error unknown_room, close 4017
//	name online in the room     error name_taken, close 4009 (the bot's name too)
//	room at its cap             error room_full, close 4015 (the bot counts)
//
// A name held by a connection that does not answer a fresh WebSocket ping
// within 5 s (nameProbeTimeout, on platform.Deps.Clock) is not refused: that holder is
// a ghost, a client whose network dropped without a close that is now
// reconnecting. The ghost is closed with 4010 (and leaves, with presence)
// and the newcomer joins. A holder that answers keeps the name; the newcomer
// gets name_taken after that round trip. So does one that sends a message
// meanwhile, or whose reader is held back by backpressure (its file chunks
// wait for a slow recipient), which cannot read a pong.
//
// The first frame after a successful handshake is presence; every join and
// every leave (close, crash, heartbeat timeout, any kick) sends the full
// sorted list, the recipient and the bot included, with the relay's ts (ms),
// to every member of the room.
//
// # Messages
//
// A text frame must be UTF-8 JSON and an object (else bad_json). Its type
// selects msg, file-start, file-end or ping (else unknown_type). Field names
// are matched exactly and the last duplicate wins, as recipients' JSON
// readers do, so what the relay validates is what they read. msg and
// file-start need from equal to the authenticated name (missing_from,
// from_mismatch) and to an array of strings (missing_to); file-end needs
// from. Each of those three errors is a strike; the tenth closes with 4013
// after its error frame. Errors about a msg or file frame carry its msgId.
//
// A msg is forwarded to each online member named in to (deduplicated; [] is
// every member but the sender) byte for byte with `,"ts":<ms>` spliced in
// before the closing brace, unknown fields and spacing kept. The sender then
// gets {"type":"ack","msgId","threadId","delivered","offline"}: for a
// broadcast delivered is every other member in sorted order; names that were
// not online are offline and the message is dropped for them (no queue).
// The bot of a bound room is listed only as described under "Bridge".
// {"type":"ping"} is answered with {"type":"pong","ts":<ms>}.
//
// # Files
//
// file-start takes the room's lock (held: transfer_busy with retryAfterMs
// 2000) and is forwarded, with ts, to the members online at that moment; they
// are the transfer's recipients, and only they get its binary frames, in
// order, and its file-end. attachment.size must be a non-negative integer
// (bad_file_start) of at most MaxFile (file_too_large). The chunk that would
// pass attachment.size, or a file-end before all of it arrived, aborts the
// transfer (size_mismatch to the sender, transfer_incomplete to recipients;
// the rest of that stream, up to MaxFile bytes, and its file-end are dropped
// quietly). A file-start refused with transfer_busy is answered once: the
// binary frames that follow it, up to its attachment.size bytes, and its
// file-end are dropped quietly, since clients stream without waiting for an
// answer. A file-end whose msgId does
// not match is dropped with bad_file_end and the transfer goes on. On
// file-end the lock is released and the sender's ack lists the recipients
// still online as delivered and the others (offline at file-start, or gone
// since) as offline. If file-end has not arrived TransferTimeout (60 s)
// after file-start, the lock is released, recipients get transfer_incomplete
// with the msgId, and the sender is closed with 4014; a sender that
// disconnects mid-transfer releases the lock and notifies the same way. Any
// other binary frame from a member that holds no transfer gets
// unexpected_binary.
//
// # Backpressure and slow members
//
// Every member has a send queue bounded in bytes (internal/wsconn), with a
// writer goroutine while frames are queued.
// A file chunk is handed to the recipients only once each of their queues
// holds less than SendQueueBytes: a slow recipient slows the sender (its
// reads stop, so TCP pushes back on it) instead of making the relay buffer
// the file; memory per recipient stays under SendQueueBytes plus one chunk
// (each frame counts 64 bytes beyond its data, so empty or tiny chunks
// fill the window too).
// Other frames never wait; a member whose queue passes SendQueueBytes +
// MaxPayload is closed with 4016 (slow consumer, its backlog dropped) and
// leaves the room; one whose single write takes longer than WriteTimeout
// (10 s) leaves the room and its connection is dropped without a close
// frame (none could get through). A member closed after the frames queued
// for it (4011, 4013, and an edge's close that reports unanswered frames)
// gets WriteTimeout from the close for that flush in all, then its
// connection is dropped likewise: a client reading slowly but steadily
// cannot keep a closing member flushing. A transfer slowed by backpressure
// is still bound by the 60 s deadline.
//
// # Heartbeat and limits
//
// The relay pings every member every HeartbeatInterval (30 s, less up to
// a tenth of jitter) at the WebSocket level; a ping still unanswered at the next tick is a miss, and
// the second consecutive miss closes the member with 4010 (logged as
// heartbeat_timeout, no error frame). A sender whose file chunks are held
// back by a slow recipient is not reading its socket, so its pong waits
// unread: a tick that finds it held back, or held back since the previous
// tick, counts no miss (the transfer's deadline bounds the wait). Any message over MaxPayload (10 MiB),
// text or binary, gets msg_too_large and close 4011. Nothing is persisted:
// the relay holds only its member tables, locks and send queues.
//
// # Bridge to Hermes gateways
//
// A room with a Tenant has the connector's bot (Room.BotName, default
// Config.BotName "hermes") in its presence. A msg whose to names the bot, or
// a broadcast whose text mentions "@<bot>", is addressed to it. The bot
// drops it when its hopCount is at least HopLimit (default 3; metrics reason
// hop_limit), when msgId is not a non-empty string or threadId, text or
// hopCount has the wrong type (malformed), or while Run is not bridging
// (unavailable); the sender's ack then lists the bot in offline, as a member
// that did not get the message. Otherwise the ack lists the bot in delivered
// and the message becomes a platform.Delivery for the tenant. A broadcast
// that does not mention the bot lists it in neither. The delivery is an
// inbound MessageEvent with text, message_id msgId and the SessionSource
//
//	platform "nexscope", chat_id = chat_name = room name, chat_type "group",
//	user_id = user_name = from, thread_id = threadId (null when absent),
//	message_id = msgId, is_bot = (role == "userAgent")
//
// keyed by platform.Deps.Key, so the session key follows the tenant's
// session options. A stock gateway knows no platform "nexscope" and reads
// it as "relay" (hermes-wire.md §6.2), so by default the key is
// agent:main:relay:group:<room>:<threadId>, the gateway's own; a tenant
// whose gateways install a nexscope platform plugin sets
// session.Options.NexscopeKeyPlatform "nexscope". The source keeps platform
// "nexscope" either way. Text starting with "/" is message_type command, and
// "/stop" becomes a KindInterrupt delivery for that session instead. A
// file-start to the bot is bridged at its file-end: with a media store that
// has a public URL (platform.Deps.Media), its chunks are written to the
// store as they arrive and the inbound carries the file's re-host URL in
// media_urls and media (message_type by its mime); otherwise, or when the
// store refuses it, the text plus a note naming the file and its size. A
// message reaches only the tenant bound when it was addressed to the bot
// (a file: at its file-start, under whose store it is re-hosted): a room
// rebound or unbound before the file-end discards the re-host at once, and
// no tenant gets the file; the members do, and the ack lists the bot in
// offline (metrics reason rebound).
//
// Gateways act through Execute on rooms bound to their tenant (others get
// the uniform egress decline; ChatTenant resolves a room's tenant or
// ErrUnknownChat):
//
//   - send: a msg from the bot, role userAgent, text = content (split into
//     msgs of at most MaxText bytes on rune boundaries). It answers the
//     inbound named by reply_to (or metadata.reply_to_message_id), else the
//     last inbound of metadata.thread_id, else, when it names no message,
//     the room's last inbound (a reply_to the bridge does not remember
//     answers nothing; an inbound the sink refused is not remembered);
//     the threadId is metadata.thread_id, else that
//     inbound's, else DefaultThread ("main"); to is that inbound's author,
//     else metadata.user_id, else everyone online ([]); hopCount is that
//     inbound's hopCount + 1, else 0. No recipient online is unavailable
//     (nothing is queued). message_id is the bot msg's msgId (a ULID).
//   - typing: a no-op success; the protocol has no typing frame.
//   - get_chat_info: the room's name and type "group".
//   - send_media: the bot's file transfer of the object source_url names,
//     addressed like send: file-start (attachment name, size, mime,
//     sha256, chunkSize 65536; text = content), 64 KiB chunks that wait for
//     room in the recipients' send queues, file-end. It waits within the
//     op's deadline while another transfer holds the room's lock
//     (rate_limited after it). message_id is the file-start's msgId. Every
//     recipient gone before the file-end is unavailable; the room bound to
//     another tenant (or its tenant created again) before then aborts the
//     transfer (transfer_incomplete to the recipients) and the op fails.
//   - prompt: the question in the documented text form ("/<option_id>:
//     <label>" lines) sent like send; it is the room's open prompt until a
//     member's msg to the bot that is exactly "/<option_id>" answers it,
//     delivered with prompt_response (prompt.go; one the sink refuses
//     leaves it open).
//
// edit is not offered: the descriptor (descriptor.Nexscope) says
// supports_edit false and supports_threads false, plain markdown, and
// max_message_length MaxText; supported_ops are the keys of the egress table.
//
// # Many instances
//
// With platform.Deps.Cluster set (several connector instances on one Redis)
// each room has a home: the instance holding the room's lease runs it as
// above; the instance a client connects to checks the handshake up to the
// room, joins the member at the home and proxies its frames both ways, in
// order, with the home's send-queue accounting. cluster.go describes the
// mechanism, docs/nexscope.md draws it; a home that dies takes the room's
// lock and transfer with it and its members elsewhere are closed with 1012.
//
// # Close codes
//
// The Close values (codes.go) name every close the relay sends and its
// cause; docs/nexscope.md tabulates them.
package nexscope
