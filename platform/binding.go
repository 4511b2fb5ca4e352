package platform

// Binding gives one chat scope of a platform to a tenant: a Discord guild
// or channel, a Telegram chat, a nexscope room. The connector's registry
// (YAML routing plus the bindings made through the admin API) hands every
// Binder its complete table whenever it changes.
type Binding struct {
	// Kind is the scope: BindGuild or BindUser on Discord, BindChat on
	// Telegram, BindRoom on nexscope.
	Kind string
	// ID names the scope as the platform spells it (a snowflake, a chat
	// id, a room name).
	ID string
	// Tenant owns the scope.
	Tenant string
}

// Binding kinds.
const (
	BindGuild   = "guild"
	BindChannel = "channel"
	BindChat    = "chat"
	BindRoom    = "room"
	// BindUser gives a platform user to a tenant (author-first routing):
	// the user's messages reach that tenant wherever they are posted.
	BindUser = "user"
)

// Binder is implemented by platforms whose chat routing changes while the
// connector runs. Bind replaces the platform's routing table with
// bindings, atomically: a message is routed by the old table or by the new
// one, never by a mix. It refuses (changing nothing) a kind the platform
// does not route by or an id it cannot read.
type Binder interface {
	Bind(bindings []Binding) error
}

// Relevance is a tenant's relevance policy on one platform, as its gateway
// declares it at boot (POST /relay/policy): the gateway's require_mention,
// free_response_channels and allow_bots, projected platform-agnostically.
type Relevance struct {
	// RequireAddress makes a message need a mention of (or reply to) the
	// bot.
	RequireAddress bool
	// FreeResponseScopes are channel ids where RequireAddress is waived.
	FreeResponseScopes []string
	// AllowOtherBots admits messages of other bots.
	AllowOtherBots bool
}

// RelevanceTaker is implemented by platforms that apply the relevance
// policies gateways declare. SetRelevance replaces the table: a tenant
// absent from it keeps the platform's configured behaviour.
type RelevanceTaker interface {
	SetRelevance(byTenant map[string]Relevance)
}

// ChatGranter is implemented by platforms where a chat may be open to
// tenants besides the one ChatTenant names: with author-first routing a
// tenant may act in a channel where an author bound to it spoke. The relay
// lets an action through when ChatGranted says so, before asking
// ChatTenant.
type ChatGranter interface {
	ChatGranted(chatID, tenant string) bool
}
