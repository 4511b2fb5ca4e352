package platform

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connector/vault"
)

// This file owns author-first routing (Hermes contract §3 "Author-first
// resolution", §7.1 "owner / scope ∧ principal") for the platforms that
// route by author (Discord, Telegram), and the account-link command users
// send the bot in a DM. The rules, in order:
//
//  1. A DM of a user linked to tenants (BindUser) reaches one of them: the
//     user's DM default (BindDMDefault), else the lowest tenant id.
//  2. A message posted in a scope (channel or chat) a tenant claimed
//     (BindScope) by a user linked to that tenant reaches it.
//  3. Any other message of a linked user reaches the tenant of rule 1.
//  4. A message of an unlinked user in a claimed scope reaches the
//     claimant when its principal admits the user (PrincipalAny, or
//     PrincipalAllowList with the user on its BindAllow list; the default
//     is PrincipalOwnerOnly); otherwise it is dropped (fail-closed).
//  5. Otherwise the platform's own chat routing (guild, chat, dm_tenant)
//     decides, as without author bindings.
//
// A message reaches one tenant. Under rules 1 to 3 the author is the
// tenant's owner, and the owner floor waives the tenant's relevance
// policy (you do not @mention your own agent).

// Authors is one platform's author routing table. It is immutable; Bind
// builds a new one.
type Authors struct {
	links     map[string][]string // user -> linked tenants, sorted
	dmDefault map[string]string   // user -> tenant
	scopes    map[string]string   // claimed scope -> tenant
	principal map[string]string   // tenant -> policy
	allow     map[string]map[string]bool
}

// NewAuthors builds the table from a platform's bindings, ids already in
// their canonical spelling; bindings of other kinds are left out.
func NewAuthors(bindings []Binding) *Authors {
	a := &Authors{links: map[string][]string{}, dmDefault: map[string]string{}, scopes: map[string]string{},
		principal: map[string]string{}, allow: map[string]map[string]bool{}}
	for _, b := range bindings {
		switch b.Kind {
		case BindUser:
			if !slices.Contains(a.links[b.ID], b.Tenant) {
				a.links[b.ID] = append(a.links[b.ID], b.Tenant)
				slices.Sort(a.links[b.ID])
			}
		case BindDMDefault:
			a.dmDefault[b.ID] = b.Tenant
		case BindScope:
			a.scopes[b.ID] = b.Tenant
		case BindPrincipal:
			a.principal[b.Tenant] = b.ID
		case BindAllow:
			if a.allow[b.Tenant] == nil {
				a.allow[b.Tenant] = map[string]bool{}
			}
			a.allow[b.Tenant][b.ID] = true
		}
	}
	return a
}

// IsAuthorKind reports whether kind is one NewAuthors reads.
func IsAuthorKind(kind string) bool {
	switch kind {
	case BindUser, BindDMDefault, BindScope, BindPrincipal, BindAllow:
		return true
	}
	return false
}

// Route is where Authors sends a message.
type Route struct {
	// Tenant receives the message; empty when Drop is set.
	Tenant string
	// Owner is set when the author is linked to Tenant (the owner floor).
	Owner bool
	// Drop, when set, is why the message reaches no tenant: its scope's
	// claimant does not admit the author.
	Drop string
}

// DropPrincipal is Route.Drop for an author a claimed scope's principal
// does not admit.
const DropPrincipal = "principal"

// Route resolves a message of user. dm reports a direct message; scopes
// are the chat it was posted in, then its parent (a thread's channel). ok
// is false when the table has nothing to say and the platform's own
// routing decides (rule 5).
func (a *Authors) Route(user string, dm bool, scopes ...string) (Route, bool) {
	tenants := a.links[user]
	if dm {
		if len(tenants) == 0 {
			return Route{}, false
		}
		return Route{Tenant: a.home(user), Owner: true}, true
	}
	claim := ""
	for _, s := range scopes {
		if t, ok := a.scopes[s]; ok && s != "" {
			claim = t
			break
		}
	}
	switch {
	case claim != "" && slices.Contains(tenants, claim):
		return Route{Tenant: claim, Owner: true}, true
	case len(tenants) > 0:
		return Route{Tenant: a.home(user), Owner: true}, true
	case claim == "":
		return Route{}, false
	}
	switch a.principal[claim] {
	case PrincipalAny:
		return Route{Tenant: claim}, true
	case PrincipalAllowList:
		if a.allow[claim][user] {
			return Route{Tenant: claim}, true
		}
	}
	return Route{Drop: DropPrincipal}, true
}

// Linked reports whether user is linked to tenant.
func (a *Authors) Linked(user, tenant string) bool { return slices.Contains(a.links[user], tenant) }

// Claimed reports whether tenant claimed scope (it may act there).
func (a *Authors) Claimed(scope, tenant string) bool {
	t, ok := a.scopes[scope]
	return ok && t == tenant
}

// home is the tenant a linked user's DMs reach.
func (a *Authors) home(user string) string {
	tenants := a.links[user]
	if d := a.dmDefault[user]; slices.Contains(tenants, d) {
		return d
	}
	return tenants[0]
}

// Grants are the (chat, tenant) pairs where an author routed to the
// tenant spoke (or linked their account): the tenant may act there
// (ChatGranter). They are kept in the capability vault (kind
// vault.KindChatGrant), so with a durable vault every instance sharing the
// store sees a grant another instance made, and grants survive restarts;
// the vault's bounded in-memory front answers repeated lookups. A grant
// lasts vault.ChatGrantTTL after the last message that renewed it.
type Grants struct {
	vault vault.Store
	now   func() time.Time
	log   *slog.Logger
}

// NewGrants returns grants kept in v (nil: a process-local vault.Memory),
// judged by the clock now (nil: time.Now). Failures to store a grant are
// logged on log (nil: discarded).
func NewGrants(v vault.Store, now func() time.Time, log *slog.Logger) *Grants {
	if now == nil {
		now = time.Now
	}
	if v == nil {
		v = vault.NewMemory(vault.Config{Now: now})
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Grants{vault: v, now: now, log: log}
}

// grantKey is the vault key of tenant's grant of chat.
func grantKey(chat, tenant string) vault.Key {
	return vault.Key{Tenant: tenant, SessionKey: chat, Kind: vault.KindChatGrant}
}

// Add grants tenant the chat, or renews the grant, under ctx. A grant
// renewed less than half its TTL ago is left as it is, so a busy chat costs
// the store one write per half TTL, not one per message.
func (g *Grants) Add(ctx context.Context, chat, tenant string) {
	if chat == "" || tenant == "" {
		return
	}
	k := grantKey(chat, tenant)
	now := g.now()
	if e, ok := g.vault.Get(ctx, k); ok && now.Sub(e.Stored) < vault.ChatGrantTTL/2 {
		return
	}
	if err := g.vault.Put(ctx, k, vault.Entry{Stored: now}); err != nil {
		g.log.Warn("chat grant not stored", "chat_id", chat, "tenant", tenant, "err", err)
	}
}

// Has reports whether tenant holds a live grant of the chat, looking it up
// under ctx.
func (g *Grants) Has(ctx context.Context, chat, tenant string) bool {
	if chat == "" || tenant == "" {
		return false
	}
	_, ok := g.vault.Get(ctx, grantKey(chat, tenant))
	return ok
}

// Linker redeems the account-link codes users send the bot in a DM
// ("/link <code>", Hermes contract §3): it links (platform, userID) to the
// tenant that issued the code. The user id is the platform's own, off the
// observed DM, never anything a gateway said.
type Linker interface {
	// Link returns the tenant the user is now linked to, or an error
	// (unknown, used or expired code; the store unreachable).
	Link(ctx context.Context, platform, userID, code string) (tenant string, err error)
}

// ErrLinkRefused is a Linker's answer to an unknown, used or expired
// code.
var ErrLinkRefused = errors.New("link code unknown, used or expired")

// Replies to a /link DM.
const (
	LinkedReply    = "Linked: your messages now reach your agent."
	LinkFailReply  = "That link code is not valid: it is unknown, used or expired. Ask for a new one."
	LinkErrorReply = "Linking failed for now; try again in a minute."
)

// LinkAnswer is the reply to a /link DM the Linker answered with err, and
// the reason the platform counts the consumed DM under.
func LinkAnswer(err error) (reply, reason string) {
	switch {
	case errors.Is(err, ErrLinkRefused):
		return LinkFailReply, "link_refused"
	case err != nil:
		return LinkErrorReply, "link_failed"
	}
	return LinkedReply, "link_consumed"
}

// maxLinkText bounds the text ParseLinkCommand looks at.
const maxLinkText = 4096

// ParseLinkCommand reports whether text is the account-link command:
// "/link", optionally "@botname" (Telegram), then the code. The code is
// returned as typed, possibly empty or malformed (the registry judges
// it). Platforms consume a DM that is a link command, whatever its code:
// it never reaches a gateway.
func ParseLinkCommand(text string) (code string, ok bool) {
	if len(text) > maxLinkText {
		return "", false
	}
	text = strings.TrimSpace(text)
	if len(text) < 5 || !strings.EqualFold(text[:5], "/link") {
		return "", false
	}
	rest := text[5:]
	if rest != "" && rest[0] == '@' {
		end := strings.IndexFunc(rest, unicode.IsSpace)
		if end < 0 {
			end = len(rest)
		}
		rest = rest[end:]
	}
	if r, _ := utf8.DecodeRuneInString(rest); rest != "" && !unicode.IsSpace(r) {
		return "", false // "/linked", "/links", …
	}
	return strings.TrimSpace(rest), true
}
