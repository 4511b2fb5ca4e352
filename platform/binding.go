package platform

import (
	"context"
	"strings"
	"time"
)

// Binding gives one chat scope of a platform to a tenant: a Discord guild,
// a Telegram chat, a Slack workspace or channel, a nexscope room. The
// connector's registry (YAML routing plus the bindings made through the
// admin API) hands every Binder its complete table whenever it changes.
type Binding struct {
	// Kind is the scope: BindGuild on Discord, BindChat on Telegram,
	// BindTeam and BindChannel on Slack, BindRoom on nexscope,
	// BindPhoneNumber on WhatsApp Cloud; on Discord, Telegram and Slack also
	// the management plane's BindUser, BindScope, BindDMDefault,
	// BindPrincipal and BindAllow, on WhatsApp Cloud BindUser and
	// BindDMDefault. Ownership (ownership.go) reads them all.
	Kind string
	// ID names the scope as the platform spells it (a snowflake, a chat
	// id, a room name).
	ID string
	// Tenant owns the scope.
	Tenant string
	// Space is, for a scope claim, the space the claimed chat was found
	// in when it was claimed (a Discord guild; see Chat.Space), so a
	// binding of that space sets the claim aside (Ownership.SetAside);
	// empty otherwise.
	Space string
	// Since is when the binding or claim was written through the admin
	// API or the management plane: since then its tenant holds the scope,
	// and a message posted there before is not its own unless recorded
	// so (MayChange). Zero (a YAML binding, or one an earlier version
	// wrote) knows no change of holder.
	Since time.Time
}

// Binding kinds.
const (
	BindGuild   = "guild"
	BindChannel = "channel"
	BindTeam    = "team"
	BindChat    = "chat"
	BindRoom    = "room"
	// BindPhoneNumber gives a WhatsApp Cloud business phone number (its
	// phone_number_id) to a tenant.
	BindPhoneNumber = "phone_number"
	// BindUser links a platform user to a tenant (author-first routing,
	// authors.go): the user's messages reach that tenant wherever they are
	// posted. A user may be linked to several tenants.
	BindUser = "user"
	// BindScope claims a channel (Discord) or chat (Telegram) for a tenant
	// through the management plane: the tenant's principal decides whose
	// messages there reach it. A scope has at most one tenant.
	BindScope = "scope"
	// BindDMDefault names, by its Tenant, the tenant a user's DMs reach
	// when the user is linked to several; ID is the user.
	BindDMDefault = "dm_default"
	// BindPrincipal sets its Tenant's principal policy on the platform; ID
	// is the policy: PrincipalOwnerOnly, PrincipalAllowList or
	// PrincipalAny.
	BindPrincipal = "principal"
	// BindAllow puts the user ID on its Tenant's allow-list.
	BindAllow = "allow"
)

// Principal policies: whose messages in a tenant's claimed scopes reach it
// besides its linked owners'.
const (
	PrincipalOwnerOnly = "owner-only"
	PrincipalAllowList = "allow-list"
	PrincipalAny       = "any"
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

// TenantKeeper is implemented by platforms that keep state of a tenant's
// that must end with the tenant (Discord's command manifests, what the
// nexscope bridge remembers of a room's messages and prompt), and by the
// media store (the objects of stored tenants), and by WhatsApp, which
// labels a delivery status with its sender only if configured. SetTenants
// is given every configured tenant, id -> its creation time
// (registry.Tenant.Created, zero for a declared tenant), at each apply of
// the registry; the platform forgets what it keeps for any other tenant and
// for an earlier creation of one, so a tenant deleted and made again under
// its id starts afresh, even within one apply.
type TenantKeeper interface {
	SetTenants(created map[string]time.Time)
}

// ChatGranter is implemented by platforms where a chat may be open to a
// tenant that ChatTenant does not name: its claimant, or a tenant an
// author routed to spoke for (Ownership.Hold, rules 2 and 3). Authorize
// lets an action through when ChatGranted says so, before asking
// ChatTenant.
type ChatGranter interface {
	// ChatGranted reports how tenant holds chatID by a claim or a grant
	// that the ownership order lets stand there (HoldNone: by neither).
	// Placing the chat may ask the platform, on the share of the tenant in
	// ctx (WithTenant); an error wrapping ErrUnavailable says it could not.
	ChatGranted(ctx context.Context, chatID, tenant string) (Hold, error)
}

// Hold is how a tenant holds a chat it may act in.
type Hold uint8

// Holds.
const (
	// HoldNone: the tenant may not act in the chat.
	HoldNone Hold = iota
	// HoldOwn: the chat is the tenant's alone: bound to it, claimed by
	// it, or its by the platform's fallback (ChatTenant).
	HoldOwn
	// HoldGrant: the tenant acts there on an author-link grant (rule 3),
	// or beside another owner (a Slack Connect channel on one Slack
	// bot_token), as other tenants may: it edits and deletes only the
	// messages the bot posted for it there (Execute, Grants.Posted).
	HoldGrant
)

// ScopeLocator is implemented by platforms whose chats the management
// plane claims: it places a chat before a claim is judged (the visibility
// floor, Hermes contract §7.1, and Ownership.Claim).
type ScopeLocator interface {
	// LocateChat returns chatID, in its canonical spelling, as the bot
	// sees it: its parent channel, its space, whether it is a DM. It asks
	// the platform on the share of the tenant in ctx (WithTenant) when it
	// is not cached. It returns ErrUnknownChat when the bot cannot see the
	// chat (or chatID is no chat id of the platform), and an error
	// wrapping ErrUnavailable when the platform could not be asked.
	LocateChat(ctx context.Context, chatID string) (Chat, error)
}

// ValidWhatsAppID reports whether s is a WhatsApp Cloud id as Meta spells
// phone number ids and wa_ids: 1 to 32 decimal digits.
func ValidWhatsAppID(s string) bool {
	return s != "" && len(s) <= 32 && strings.Trim(s, "0123456789") == ""
}
