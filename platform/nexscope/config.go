package nexscope

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"connector/internal/nonneg"
	"connector/store"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultMaxUsers          = 50
	DefaultMaxPayload        = 10 << 20  // 10 MiB
	DefaultMaxFile           = 100 << 20 // 100 MiB
	DefaultTransferTimeout   = 60 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultSendQueueBytes    = 4 << 20 // 4 MiB
	DefaultHopLimit          = 3
	DefaultBotName           = "hermes"
	DefaultMaxText           = 4096
	DefaultRememberMessages  = 1024
	// DefaultRoom is the name (and chat_id) of the room served at /ws.
	DefaultRoom = "default"
	// DefaultThread is the threadId of the bot's msgs when the gateway names
	// no thread and the message it answers had none (threadId absent or
	// null), or it answers nothing the bridge remembers.
	DefaultThread = "main"
)

// Config configures the nexscope relay. The zero value plus a Token works:
// New fills every zero field with the default its comment names.
type Config struct {
	// Token is the shared token every client presents as ?token=. Required.
	// The connector fills it from NEXSCOPE_TOKEN or its config file; it is
	// compared in constant time and never logged. One token opens every
	// room: at least 16 characters and 64 bits by the estimate of
	// docs/security.md (a random one: openssl rand -hex 32).
	Token string `yaml:"token"`
	// MaxUsers is the default member cap of a room, the connector's bot
	// member included (NEXSCOPE_MAX_USERS). Default 50.
	MaxUsers int `yaml:"max_users"`
	// MaxPayload caps one WebSocket message, text or binary, in bytes
	// (NEXSCOPE_MAX_PAYLOAD). A larger one gets msg_too_large and close 4011.
	// Default 10 MiB, at least 4096, at most 1 GiB.
	MaxPayload int64 `yaml:"max_payload"`
	// MaxFile caps attachment.size of a file-start in bytes
	// (NEXSCOPE_MAX_FILE). Default 100 MiB.
	MaxFile int64 `yaml:"max_file"`
	// TransferTimeout is how long after file-start the file-end must arrive
	// before the transfer is abandoned (sender closed 4014). Default 60 s.
	TransferTimeout time.Duration `yaml:"transfer_timeout"`
	// HeartbeatInterval is the period of the relay's WebSocket pings; two
	// consecutive unanswered pings close the connection with 4010.
	// Default 30 s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// WriteTimeout bounds one WebSocket write to a member; a member that does
	// not take a frame within it is disconnected. It also bounds, in all, the
	// flush of what was queued to a member being closed after it (4011, 4013,
	// 1001 at shutdown, and with several instances the closes that report
	// unanswered frames), after which its socket is dropped; a shutdown's
	// flushes run together, so it waits this long at most. Default 10 s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// SendQueueBytes is the per-member send window: a file chunk waits
	// (backpressure on the sender) while a recipient has this many bytes
	// queued, and a member whose queue exceeds it by more than MaxPayload is
	// closed as a slow consumer (4016). Default 4 MiB, at most 1 GiB.
	SendQueueBytes int64 `yaml:"send_queue_bytes"`
	// HopLimit drops a message to the bot whose hopCount is at least this
	// value, so agents cannot start reply loops through the bridge. Default 3;
	// negative means no limit.
	HopLimit int `yaml:"hop_limit"`
	// BotName is the default member name of the connector's bot in rooms bound
	// to a tenant. Default "hermes".
	BotName string `yaml:"bot_name"`
	// MaxText is the descriptor's max_message_length and the largest text, in
	// bytes, of one msg the bot sends; longer replies are split on rune
	// boundaries. Default 4096 (the protocol's suggested 4 KB).
	MaxText int `yaml:"max_text"`
	// RememberMessages is how many inbound messages per room the bridge
	// remembers to address replies (author, thread, hopCount). Default 1024.
	RememberMessages int `yaml:"remember_messages"`
	// OriginPatterns lists browser origins allowed to connect besides the
	// request's own host (coder/websocket AcceptOptions.OriginPatterns).
	// Default none; clients that send no Origin header are always allowed.
	OriginPatterns []string `yaml:"origin_patterns"`
	// ClusterAddr is the host:port this instance listens on, with several
	// instances, for the other instances' direct streams, and gives them to
	// dial: the host must be an address they reach (not 0.0.0.0); port 0
	// picks a free one. Member frames, file chunks and their credits then
	// go straight from instance to instance instead of through Redis
	// pub/sub (docs/nexscope.md, "Many instances"). Set it on every
	// instance or on none. Default "": everything crosses Redis pub/sub.
	ClusterAddr string `yaml:"cluster_addr"`
	// ClaimTimeout bounds the store's claim of a forwarded action given up
	// on, which the action's answer waits for; one not decided within it
	// leaves the answer ambiguous. It must outlast the store's wait for
	// store.redis_min_replicas, else a claim waiting for slow replicas is
	// cut off (and released by the store): the connector sets it to
	// redis_replica_timeout plus a second. Default
	// store.DefaultRedisReplicaTimeout plus a second.
	ClaimTimeout time.Duration `yaml:"-"`
	// Rooms configures named rooms and the default room (Name "default").
	// The default room always exists; a room is served at /ws/{name}, the
	// default room also at /ws. Default: only the default room, unbound.
	Rooms []Room `yaml:"rooms"`
}

// Room configures one room.
type Room struct {
	// Name selects the room: clients connect to /ws/{Name}. It follows the
	// user-name rule ^[a-zA-Z0-9_-]{1,32}$ and is the chat_id gateways see.
	// "default" configures the room at /ws.
	Name string `yaml:"name"`
	// Tenant binds the room to a tenant: the connector's bot member joins its
	// presence and bridges messages addressed to it to that tenant's
	// gateways. Empty: a plain relay room with no bot.
	Tenant string `yaml:"tenant"`
	// BotName is the bot's member name in this room. Default Config.BotName.
	BotName string `yaml:"bot_name"`
	// MaxUsers caps this room's members, the bot included. Default
	// Config.MaxUsers.
	MaxUsers int `yaml:"max_users"`
}

// Validate reports the first invalid field, naming its config key.
func (c *Config) Validate() error {
	if c.Token == "" {
		return errors.New("nexscope: token is required")
	}
	if err := nonneg.Check("nexscope: ", c, "hop_limit"); err != nil {
		return err
	}
	if c.MaxPayload > 0 && c.MaxPayload < minPayload {
		return fmt.Errorf("nexscope: max_payload must be at least %d bytes", minPayload)
	}
	if c.MaxPayload > maxBytes {
		return fmt.Errorf("nexscope: max_payload must be at most %d bytes (1 GiB)", maxBytes)
	}
	if c.SendQueueBytes > maxBytes {
		return fmt.Errorf("nexscope: send_queue_bytes must be at most %d bytes (1 GiB)", maxBytes)
	}
	if c.ClusterAddr != "" {
		host, _, err := net.SplitHostPort(c.ClusterAddr)
		if ip := net.ParseIP(host); err != nil || host == "" || ip != nil && ip.IsUnspecified() {
			return errors.New("nexscope: cluster_addr must be host:port with a host the other instances reach")
		}
	}
	if c.MaxText > 0 && c.MaxText < 8 {
		return errors.New("nexscope: max_text must be at least 8 bytes")
	}
	if c.BotName != "" && !validName(c.BotName) {
		return errors.New("nexscope: bot_name must match ^[a-zA-Z0-9_-]{1,32}$")
	}
	seen := make(map[string]bool, len(c.Rooms))
	for i, r := range c.Rooms {
		if !validName(r.Name) {
			return fmt.Errorf("nexscope: rooms[%d].name must match ^[a-zA-Z0-9_-]{1,32}$", i)
		}
		if seen[r.Name] {
			return fmt.Errorf("nexscope: rooms[%d].name %q is configured twice", i, r.Name)
		}
		seen[r.Name] = true
		if r.BotName != "" && !validName(r.BotName) {
			return fmt.Errorf("nexscope: rooms[%d].bot_name must match ^[a-zA-Z0-9_-]{1,32}$", i)
		}
		if r.MaxUsers < 0 {
			return fmt.Errorf("nexscope: rooms[%d].max_users must not be negative", i)
		}
		if r.BotName != "" && r.Tenant == "" {
			return fmt.Errorf("nexscope: rooms[%d].bot_name is set but the room has no tenant", i)
		}
		if r.Tenant != "" && (r.MaxUsers == 1 || r.MaxUsers == 0 && c.MaxUsers == 1) {
			return fmt.Errorf("nexscope: rooms[%d].max_users leaves no place beside the bot", i)
		}
	}
	return nil
}

// minPayload is the smallest MaxPayload that still carries every frame the
// relay itself sends (presence of a full room, errors, acks).
const minPayload = 4096

// maxBytes is the largest MaxPayload and SendQueueBytes: the read limit is
// MaxPayload+1 and the slow-consumer bound their sum, which near MaxInt64
// would overflow (turning the read limit off).
const maxBytes = 1 << 30

// WithDefaults returns c with every zero field set to its default: the
// configuration New runs with.
func (c Config) WithDefaults() Config {
	c.MaxUsers = cmp.Or(c.MaxUsers, DefaultMaxUsers)
	c.MaxPayload = cmp.Or(c.MaxPayload, DefaultMaxPayload)
	c.MaxFile = cmp.Or(c.MaxFile, DefaultMaxFile)
	c.TransferTimeout = cmp.Or(c.TransferTimeout, DefaultTransferTimeout)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.SendQueueBytes = cmp.Or(c.SendQueueBytes, DefaultSendQueueBytes)
	c.HopLimit = cmp.Or(c.HopLimit, DefaultHopLimit)
	c.BotName = cmp.Or(c.BotName, DefaultBotName)
	c.MaxText = cmp.Or(c.MaxText, DefaultMaxText)
	c.RememberMessages = cmp.Or(c.RememberMessages, DefaultRememberMessages)
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, store.DefaultRedisReplicaTimeout+time.Second)
	return c
}

// nameChars are the characters of user and room names.
const nameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

// validName reports whether s matches ^[a-zA-Z0-9_-]{1,32}$ (user and room
// names).
func validName(s string) bool { return len(s) >= 1 && len(s) <= 32 && strings.Trim(s, nameChars) == "" }
