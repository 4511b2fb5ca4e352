package platform

import (
	"slices"
	"strings"
	"time"
)

// This file owns who a chat belongs to on a platform shared by tenants,
// and so who receives a message posted there and who may act there. Every
// platform that routes by binding, scope claim or author (Discord and
// Telegram, and the platforms added after them) builds an Ownership from
// its bindings and asks it; none decides ownership by itself. The order
// (docs/security.md, "Chat ownership"):
//
//  1. Bound. A binding of the chat, of the channel a thread is in, or of
//     the space that holds it (a Discord guild, a Slack workspace), made
//     in the configuration (YAML) or through the admin API, gives it to
//     its tenant. In a bound chat nothing below applies: every message
//     reaches the bound tenant (under the owner floor when the author is
//     linked to it) and only that tenant may act there.
//  2. Claimed. A scope claim (the management plane's BindScope) of the
//     chat, or of the channel a thread is in, gives it to the claimant,
//     unless rule 1 gives it to a tenant: a claim inside a chat bound to
//     another tenant is set aside (kept in the store, ignored, reported).
//     A message there reaches the claimant when its author is linked to
//     the claimant or the claimant's principal admits the author
//     (PrincipalAny, PrincipalAllowList), and nobody otherwise; only the
//     claimant may act there. A DM is never claimed.
//  3. Author links. Elsewhere a linked user's message reaches the user's
//     tenant (the user's DM default when linked to several, else the
//     lowest tenant id), which the platform then grants the chat
//     (Grants): a tenant may act where an author routed to it spoke (a
//     claimant is granted the chats of its claim where messages reached
//     it, a thread of its claimed channel among them).
//  4. Otherwise the platform's own fallback decides (Discord's dm_tenant
//     for a DM whose user is linked to no other tenant: LinkedElsewhere),
//     or nobody does.
//
// A message reaches one tenant. Under rules 1 and 2 the owner floor
// (Route.Owner) holds for authors linked to the chat's tenant, under rule
// 3 always: you do not @mention your own agent.

// Chat is where a message or an action is, as the ownership order reads
// it. Ids are in the platform's canonical spelling, as its bindings are.
type Chat struct {
	// ID is the chat: a Discord channel or thread, a Telegram chat, a
	// Slack conversation.
	ID string
	// Parent is the channel a thread is in; "" for none.
	Parent string
	// Space is what holds the chat and may be bound as a whole: a Discord
	// guild, a Slack workspace; "" for none (a DM, a Telegram chat).
	Space string
	// DM reports a direct message with one user.
	DM bool
}

// Ownership is one platform's chat ownership: its bindings, scope claims,
// links, DM defaults and principals, applied in the order above. It is
// immutable; a platform builds a new one from its complete bindings on
// every Bind.
type Ownership struct {
	bound     map[string]string  // bound chat, channel or space -> tenant
	claims    map[string]Binding // claimed chat -> its claim
	links     map[string][]string
	dmDefault map[string]string    // user -> tenant
	principal map[string]string    // tenant -> policy
	allow     map[[2]string]bool   // (tenant, user) on its allow-list
	since     map[string]time.Time // bound id -> Binding.Since, when set
}

// NewOwnership builds the ownership of one platform's bindings, ids
// already in their canonical spelling: BindGuild, BindTeam, BindChannel,
// BindChat, BindRoom and BindPhoneNumber bind; the author kinds
// (IsAuthorKind) and BindPrincipal claim, link and admit.
func NewOwnership(bindings []Binding) *Ownership {
	o := &Ownership{bound: map[string]string{}, claims: map[string]Binding{}, links: map[string][]string{},
		dmDefault: map[string]string{}, principal: map[string]string{}, allow: map[[2]string]bool{}, since: map[string]time.Time{}}
	for _, b := range bindings {
		switch b.Kind {
		case BindGuild, BindTeam, BindChannel, BindChat, BindRoom, BindPhoneNumber:
			o.bound[b.ID] = b.Tenant
			if !b.Since.IsZero() {
				o.since[b.ID] = b.Since
			}
		case BindScope:
			o.claims[b.ID] = b
		case BindUser:
			if !slices.Contains(o.links[b.ID], b.Tenant) {
				o.links[b.ID] = append(o.links[b.ID], b.Tenant)
				slices.Sort(o.links[b.ID])
			}
		case BindDMDefault:
			o.dmDefault[b.ID] = b.Tenant
		case BindPrincipal:
			o.principal[b.Tenant] = b.ID
		case BindAllow:
			o.allow[[2]string{b.Tenant, b.ID}] = true
		}
	}
	return o
}

// IsAuthorKind reports whether kind is one of the management plane's
// kinds besides BindPrincipal: links, claims, DM defaults, allow-lists.
func IsAuthorKind(kind string) bool {
	switch kind {
	case BindUser, BindDMDefault, BindScope, BindPrincipal, BindAllow:
		return true
	}
	return false
}

// Owner returns the tenant c is bound to (rule 1): a binding of the chat,
// else of its parent channel, else of its space.
func (o *Ownership) Owner(c Chat) (string, bool) {
	for _, id := range [...]string{c.ID, c.Parent, c.Space} {
		if t, ok := o.bound[id]; ok && id != "" {
			return t, true
		}
	}
	return "", false
}

// claimOf returns the claim of c, else of its parent channel; a DM has
// none. It does not look at bindings: rule 1 comes first at every caller.
func (o *Ownership) claimOf(c Chat) (Binding, bool) {
	if c.DM {
		return Binding{}, false
	}
	for _, id := range [...]string{c.ID, c.Parent} {
		if b, ok := o.claims[id]; ok && id != "" {
			return b, true
		}
	}
	return Binding{}, false
}

// Route is where a message goes.
type Route struct {
	// Tenant receives the message; empty when Drop is set.
	Tenant string
	// Owner is set when the author is linked to Tenant (the owner floor:
	// the tenant's mention rules are waived).
	Owner bool
	// Grant is set when the message reached Tenant by claim or by author
	// link (rules 2 and 3): the platform grants Tenant the chat (Grants),
	// so it may answer there, in a thread of its claimed channel too. A
	// grant counts only where no binding or claim of another tenant does
	// (MayAct).
	Grant bool
	// Drop, when set, is why the message reaches no tenant: the chat's
	// claimant does not admit its author.
	Drop string
}

// DropPrincipal is Route.Drop for an author a claimed chat's principal
// does not admit.
const DropPrincipal = "principal"

// Route resolves user's message in c by rules 1 to 3. ok is false when
// none places it and the platform's fallback decides (rule 4); r is
// then the zero Route, which callers rely on.
func (o *Ownership) Route(user string, c Chat) (r Route, ok bool) {
	if owner, ok := o.Owner(c); ok {
		return Route{Tenant: owner, Owner: o.Linked(user, owner)}, true
	}
	if cl, ok := o.claimOf(c); ok {
		claimant := cl.Tenant
		switch {
		case o.Linked(user, claimant):
			return Route{Tenant: claimant, Owner: true, Grant: true}, true
		case o.principal[claimant] == PrincipalAny,
			o.principal[claimant] == PrincipalAllowList && o.allow[[2]string{claimant, user}]:
			return Route{Tenant: claimant, Grant: true}, true
		}
		return Route{Drop: DropPrincipal}, true
	}
	if len(o.links[user]) > 0 {
		return Route{Tenant: o.home(user), Owner: true, Grant: true}, true
	}
	return Route{}, false
}

// home is the tenant a linked user's messages reach under rule 3.
func (o *Ownership) home(user string) string {
	tenants := o.links[user]
	if d := o.dmDefault[user]; slices.Contains(tenants, d) {
		return d
	}
	return tenants[0]
}

// MayAct reports whether rules 1 to 3 let tenant act in c (Hold).
func (o *Ownership) MayAct(tenant string, c Chat, granted func() bool) bool {
	return o.Hold(tenant, c, granted) != HoldNone
}

// Holder returns the tenant rules 1 and 2 give c to: its owner (Owner),
// else its claimant; held is false when neither does.
func (o *Ownership) Holder(c Chat) (tenant string, held bool) {
	if t, ok := o.Owner(c); ok {
		return t, true
	}
	cl, claimed := o.claimOf(c)
	return cl.Tenant, claimed
}

// HeldSince is when c's holder (Holder) came to hold it: the Since of the
// binding or claim that gives it; zero when none does or it has none
// (no change of holder known).
func (o *Ownership) HeldSince(c Chat) time.Time {
	for _, id := range [...]string{c.ID, c.Parent, c.Space} {
		if _, ok := o.bound[id]; ok && id != "" {
			return o.since[id]
		}
	}
	if cl, ok := o.claimOf(c); ok {
		return cl.Since
	}
	return time.Time{}
}

// Hold is how rules 1 to 3 let tenant act in c: in a bound chat only its
// owner, in a claimed one only its claimant (HoldOwn), elsewhere a tenant
// granted the chat by author (rule 3, HoldGrant), which granted reports;
// it is called only there. Rule 4 is the platform's ChatTenant.
func (o *Ownership) Hold(tenant string, c Chat, granted func() bool) Hold {
	holder, held := o.Holder(c)
	switch {
	case held && holder == tenant:
		return HoldOwn
	case !held && granted():
		return HoldGrant
	}
	return HoldNone
}

// ClaimOutcome is the ownership order's answer to a tenant's scope claim.
type ClaimOutcome int

// Claim outcomes.
const (
	// ClaimRefused: c is a DM, or bound to another tenant, or in a channel
	// another tenant claimed, or another tenant's stored claim of it
	// stands.
	ClaimRefused ClaimOutcome = iota
	// ClaimStore: nobody holds c: store the claim.
	ClaimStore
	// ClaimHeld: the tenant holds the claim already.
	ClaimHeld
	// ClaimReplace: another tenant's claim of c is stored, but c is bound
	// to the claiming tenant, which sets that claim aside: replace it.
	ClaimReplace
)

// Claim judges tenant's claim of c, which holder claims in the store now
// ("" for nobody; the store may be newer than o).
func (o *Ownership) Claim(tenant, holder string, c Chat) ClaimOutcome {
	owner, bound := o.Owner(c)
	parent, ok := o.claims[c.Parent]
	switch {
	case c.DM, bound && owner != tenant, c.Parent != "" && ok && parent.Tenant != tenant:
		return ClaimRefused
	case holder == "":
		return ClaimStore
	case holder == tenant:
		return ClaimHeld
	case bound:
		return ClaimReplace
	}
	return ClaimRefused
}

// SetAsideClaim is a stored scope claim rule 1 sets aside.
type SetAsideClaim struct {
	Claim Binding
	// Owner is the tenant the claimed chat is bound to.
	Owner string
}

// SetAside lists the claims rule 1 sets aside as far as the bindings
// tell: a claim of a chat, or made in a space (Binding.Space), that is
// bound to another tenant, sorted by chat. (A claim of a channel whose
// guild is bound, made before claims recorded their space, is set aside
// all the same when a message or action names the guild.)
func (o *Ownership) SetAside() []SetAsideClaim {
	var out []SetAsideClaim
	for _, cl := range o.claims {
		if owner, ok := o.Owner(Chat{ID: cl.ID, Space: cl.Space}); ok && owner != cl.Tenant {
			out = append(out, SetAsideClaim{Claim: cl, Owner: owner})
		}
	}
	slices.SortFunc(out, func(a, b SetAsideClaim) int { return strings.Compare(a.Claim.ID, b.Claim.ID) })
	return out
}

// Claimed reports whether tenant's claim of exactly chatID is stored,
// whatever sets it aside: a platform's cheap first question before it
// places the chat for MayAct, which decides.
func (o *Ownership) Claimed(chatID, tenant string) bool {
	_, ok := o.ClaimedIn(chatID, tenant)
	return ok
}

// ClaimedIn is Claimed, with the space the claim was made in (Binding.Space:
// "" when the claim did not record one), which a platform places the chat
// by when it has not seen it.
func (o *Ownership) ClaimedIn(chatID, tenant string) (space string, ok bool) {
	cl, ok := o.claims[chatID]
	if !ok || cl.Tenant != tenant {
		return "", false
	}
	return cl.Space, true
}

// YieldsTo reports whether a binding tenant makes of id for itself (a
// provision's routeKeys, not an operator's binding) must yield to a tenant
// it would take the chat from: another tenant's claim of id or made inside
// it (id a Discord guild), or a user linked to other tenants and not to
// tenant (a Telegram private chat's id is its user's; ids of other kinds
// never name a user). Bindings are the registry's to compare; a binding
// made by an operator overrides claims and links (rule 1).
func (o *Ownership) YieldsTo(tenant, id string) bool {
	for _, cl := range o.claims {
		if cl.Tenant != tenant && (cl.ID == id || cl.Space == id) {
			return true
		}
	}
	users := o.links[id]
	return len(users) > 0 && !slices.Contains(users, tenant)
}

// Linked reports whether user is linked to tenant.
func (o *Ownership) Linked(user, tenant string) bool { return slices.Contains(o.links[user], tenant) }

// LinkedElsewhere reports whether user is linked to a tenant other than
// tenant: then rule 3 places user's DMs, and a platform's DM fallback
// (rule 4) must not give them to tenant.
func (o *Ownership) LinkedElsewhere(user, tenant string) bool {
	return slices.ContainsFunc(o.links[user], func(t string) bool { return t != tenant })
}
