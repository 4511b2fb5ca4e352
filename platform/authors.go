package platform

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"connector/internal/clock"
	"connector/platform/fairshare"
	"connector/vault"
)

// This file holds what author-first routing (Hermes contract §3
// "Author-first resolution", §7.1; its place in the ownership order is
// ownership.go's) needs besides the order itself: the grants a tenant gets
// where its authors spoke, and the account-link command users send the bot
// in a DM.

// Grants are the (chat, tenant) pairs of one platform where an author
// routed to the tenant spoke (or linked their account): the tenant may act
// there (ChatGranter). They are kept in the capability vault (kind
// vault.KindChatGrant), so with a durable vault every instance sharing the
// store sees a grant another instance made, and grants survive restarts;
// the vault's bounded in-memory front answers repeated lookups. A grant
// lasts vault.ChatGrantTTL after the last message that renewed it, and
// records the space the message was in (a Discord guild, a Slack
// workspace), so an instance that never saw the chat can place it before
// it lets the grant stand (Ownership.MayAct). A grant is keyed by the
// platform, the chat and the tenant: the vault is shared by every platform,
// whose chat ids may coincide (a Telegram private chat's id, a Discord
// channel's snowflake and a WhatsApp number are all digits), and a grant
// made on one platform authorizes nothing on another.
type Grants struct {
	platform string
	vault    vault.Store
	clock    clock.Clock
	log      *slog.Logger
	// mu guards stored, failed and probing.
	mu sync.Mutex
	// stored are the records of posted messages Posted stored or poster
	// read lately (ChatGrantTTL/2, a read one no longer than its entry
	// lives), which Posted does not store again and poster does not read,
	// and the old marks (tenantMark) PostedBy found missing (a poster of
	// none), each held by the tenant whose op stored or read it: a
	// tenant posting, or editing ids it never posted, fast pushes out its
	// own, not those another keeps within its share.
	stored *fairshare.LRU[vault.Key, keptPoster]
	// failed is when the last record write (write) failed (zero: it
	// succeeded); probing, whether one tries the store again.
	failed  time.Time
	probing bool
}

// keptPoster is a poster kept in Grants.stored until until.
type keptPoster struct {
	poster
	until time.Time
}

// writeRetry is how long after a record write failed the next is tried
// (write): a send does not wait for a store that is down.
const writeRetry = time.Second

// errWriteSkipped is write's answer to a write it did not try.
var errWriteSkipped = errors.New("not tried: the store failed a write less than 1s ago, or is being tried again")

// postedStored bounds Grants.stored, shared by the platform's tenants:
// the messages an instance answers again and again (a Slack stream's,
// once per frame) are each tenant's latest.
const postedStored = 4096

// NewGrants returns the grants of the chats of platform name (its
// Platform.Name), kept in v (nil: a process-local vault.Memory), judged by
// the clock c (nil: clock.System). Failures to store a grant are logged on
// log (nil: discarded).
func NewGrants(name string, v vault.Store, c clock.Clock, log *slog.Logger) *Grants {
	c = cmp.Or(c, clock.System)
	if v == nil {
		v = vault.NewMemory(vault.Config{Clock: c})
	}
	return &Grants{
		platform: name, vault: v, clock: c, log: cmp.Or(log, slog.New(slog.DiscardHandler)),
		stored: fairshare.NewLRU[vault.Key, keptPoster](postedStored, nil),
	}
}

// kept is the poster g.stored keeps under k, unless it expired.
func (g *Grants) kept(k vault.Key) (poster, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.stored.Get(k)
	if ok && !g.clock.Now().Before(p.until) {
		g.stored.Remove(k)
		return poster{}, false
	}
	return p.poster, ok
}

// keep keeps p under k until until, held by tenant, whose op stored or
// read it.
func (g *Grants) keep(tenant string, k vault.Key, p poster, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stored.Add(tenant, k, keptPoster{p, until})
}

// grantKey is the vault key of tenant's grant of chat on g's platform: the
// session key is the platform name with its length, then the chat, so no
// (platform, chat) pair shares another's key.
func (g *Grants) grantKey(chat, tenant string) vault.Key {
	return vault.Key{Tenant: tenant, SessionKey: strconv.Itoa(len(g.platform)) + ":" + g.platform + "/" + chat, Kind: vault.KindChatGrant}
}

// Add grants tenant the chat, in space ("" for none or unknown), or renews
// the grant, under ctx. A grant of the same space renewed less than half
// its TTL ago is left as it is, so a busy chat costs the store one write
// per half TTL (two in a space: the space's record, GrantedIn, with it),
// not one per message. The grant is the tenant's as created
// at created, which the caller judged (zero: as created when Add is
// called, vault.Creation), not when its store calls end: one made again
// under its id meanwhile is not granted the chat.
func (g *Grants) Add(ctx context.Context, chat, space, tenant string, created time.Time) {
	if chat == "" || tenant == "" {
		return
	}
	k := g.grantKey(chat, tenant)
	e := vault.Entry{Ref: space, Stored: g.clock.Now(), Created: cmp.Or(created, vault.Creation(g.vault, tenant))}
	if have, ok := g.vault.Get(ctx, k); ok && have.Ref == space && e.Stored.Sub(have.Stored) < vault.ChatGrantTTL/2 {
		return
	}
	if err := g.vault.Put(ctx, k, e); err != nil {
		g.log.Warn("chat grant not stored", "platform", g.platform, "chat_id", chat, "tenant", tenant, "err", err)
		return
	}
	if space == "" {
		return
	}
	// The space's record is written with each grant in it, so it lasts as
	// long as the last one.
	if err := g.vault.Put(ctx, spaceKey(g.platform, space, tenant), e); err != nil {
		g.log.Warn("chat grant's space not stored", "platform", g.platform, "space", space, "tenant", tenant, "err", err)
	}
}

// spaceKey is the vault key recording that tenant holds a grant of a chat
// in space on platform name (Add; GrantedIn): the key of a grant of the
// space with a "/" after it, which no chat id holds.
func spaceKey(name, space, tenant string) vault.Key {
	k := (&Grants{platform: name}).grantKey(space, tenant)
	k.SessionKey += "/"
	return k
}

// GrantedIn reports whether tenant holds a live grant on platform name,
// as v keeps them (NewGrants), of the chat id or of a chat in the space
// id (a Discord guild, a Slack workspace): what a binding of id another
// tenant makes for itself yields to (registry.Registry.SetGrantedIn). err
// wraps ErrGrantUnknown when the store could not tell.
func GrantedIn(ctx context.Context, v vault.Store, name, id, tenant string) (bool, error) {
	for _, k := range [...]vault.Key{(&Grants{platform: name}).grantKey(id, tenant), spaceKey(name, id, tenant)} {
		if _, ok, err := vault.Lookup(ctx, v, k); err != nil {
			return false, fmt.Errorf("%s: %w", name, ErrGrantUnknown)
		} else if ok {
			return true, nil
		}
	}
	return false, nil
}

// AddThread grants tenant the thread it created in chat, which it holds
// by grant, for as long as that grant lasts (the thread's grant is
// stored with the chat's space and renewal time, so it ends with it
// unless a message routed to tenant in the thread renews it), and its
// creation. Only tenant is granted the thread: another tenant holding the
// chat is not.
// It is stored even when ctx ended (thread_create returned as its
// deadline came): the thread exists, and without the grant its creator
// could not post in it. Nothing is stored when tenant's grant of chat is
// gone.
func (g *Grants) AddThread(ctx context.Context, chat, thread, tenant string) {
	if thread == "" || tenant == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	e, ok := g.vault.Get(ctx, g.grantKey(chat, tenant))
	if !ok {
		return
	}
	if err := g.vault.Put(ctx, g.grantKey(thread, tenant), vault.Entry{Ref: e.Ref, Stored: e.Stored, Created: e.Created}); err != nil {
		g.log.Warn("thread grant not stored", "platform", g.platform, "chat_id", chat, "thread_id", thread, "tenant", tenant, "err", err)
	}
}

// ErrGrantUnknown is Granted's answer when the store could not tell
// whether the tenant holds the grant (vault.Lookup): it wraps
// ErrUnavailable, so that an ask answers unavailable rather than
// declined, unless ChatTenant, asked still, names the tenant.
var ErrGrantUnknown = fmt.Errorf("the chat's grant could not be looked up: %w", ErrUnavailable)

// Granted reports whether tenant holds a live grant of the chat, looking it
// up under ctx, and the space the grant was last renewed in; err wraps
// ErrGrantUnknown when the store could not tell.
func (g *Grants) Granted(ctx context.Context, chat, tenant string) (space string, ok bool, err error) {
	if chat == "" || tenant == "" {
		return "", false, nil
	}
	e, ok, err := vault.Lookup(ctx, g.vault, g.grantKey(chat, tenant))
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", g.platform, ErrGrantUnknown)
	}
	return e.Ref, ok, nil
}

// Has reports whether tenant holds a live grant of the chat; a store that
// could not tell counts as none (Granted tells it).
func (g *Grants) Has(ctx context.Context, chat, tenant string) bool {
	_, ok, _ := g.Granted(ctx, chat, tenant)
	return ok
}

// poster is the record of a message posted for tenant (none: "") as
// stored at stored, under tenant's creation then, created (zero: none
// kept); unsaved when the store did not take it (Posted tries again).
type poster struct {
	tenant          string
	stored, created time.Time
	unsaved         bool
}

// postedKey is the vault key of the record naming (Ref) the tenant the bot
// posted message in chat for (Posted): the grant's key of a tenant that is
// none's (a tenant id holds no ':'), as a message has one poster, and the
// message (a chat id, which the platform's Egress.Chat accepted, holds no
// "/"). kind is vault.KindPostedMessage, or vault.KindPromptPoster for a
// prompt's longer-lived record (Prompted).
func (g *Grants) postedKey(chat, message string, kind vault.Kind) vault.Key {
	k := g.grantKey(chat, "poster:")
	k.SessionKey, k.Kind = k.SessionKey+"/"+message, kind
	return k
}

// tenantMark is the key of the mark releases before this one (v0.2.0 and
// earlier) kept per tenant that the bot posted message in chat for it.
// PostedBy reads it on a miss of postedKey, so a message posted by grant
// before an upgrade stays its tenant's to edit. It goes in the release
// after the one that first ships postedKey (the first after v0.2.0),
// which an operator runs for a day before upgrading further: by then
// every such mark has expired (vault.ChatGrantTTL), and none is written
// once the last instance of v0.2.0 is gone.
func (g *Grants) tenantMark(chat, message, tenant string) vault.Key {
	k := g.grantKey(chat, tenant)
	k.SessionKey, k.Kind = k.SessionKey+"/"+message, vault.KindPostedMessage
	return k
}

// Posted records, for vault.ChatGrantTTL, that the bot posted message in
// chat for tenant, which holds the chat by grant, binding or claim
// (Execute): only tenant may edit or delete it there (PostedBy), also once
// another tenant holds the chat (PostedByAnother), and a reply quoting it
// is tenant's own (OwnQuote).
// The record is stored even when ctx ended (the op that posted message
// returned as its deadline came, or its caller went): the message went
// out, and without the record its tenant could not edit it. The vault
// bounds its store call, which a store that just failed one is spared
// (write); a record the store did not take, or was not asked to, is
// kept on this instance all the same (its tenant's edits here, a stream's, go on) and
// stored again as the message is answered again. A record this instance stored (or read) that
// was stored less than half its TTL ago is not stored again (as Add
// leaves a fresh grant), so a message answered once per frame (a Slack
// stream's) costs the store one write, not one per frame. created is tenant's creation (vault.Creation) as the
// op that posted message was authorized (zero: as it is now), so an op
// that returns once its tenant was deleted and made again under its id
// marks nothing the new tenant holds.
func (g *Grants) Posted(ctx context.Context, chat, message, tenant string, created time.Time) {
	k := g.postedKey(chat, message, vault.KindPostedMessage)
	if was, ok := g.kept(k); ok && was.tenant == tenant && !was.unsaved && g.clock.Now().Sub(was.stored) < vault.ChatGrantTTL/2 {
		return
	}
	if created.IsZero() {
		created = vault.Creation(g.vault, tenant)
	}
	e := vault.Entry{Ref: tenant, Stored: g.clock.Now(), Created: created}
	err := g.write(ctx, k, e)
	if err != nil {
		g.log.Warn("posted message not remembered", "platform", g.platform, "chat_id", chat, "message_id", message, "tenant", tenant, "err", err)
	}
	g.keep(tenant, k, poster{tenant, e.Stored, e.Created, err != nil}, e.Stored.Add(vault.ChatGrantTTL/2))
}

// write stores the record e under k for Posted or Prompted, even when ctx
// ended, unless a write failed less than writeRetry ago or another tries
// the store again after one did (errWriteSkipped): a send waits for the
// store (the vault bounds its call) only while the store answers, and
// for one write a window while it does not. A write that succeeds ends
// the failed state. The window is the platform's, not a tenant's, as only
// the store fails a write (down, slower than the vault's bound, out of
// memory): the record's key is at most about 200 bytes, far under the
// store's 1 KiB (its chat is one Egress.Chat accepted, its message an id
// the platform answered, never a gateway's), its value a few fixed
// fields, and the store keeps no quota per tenant, so no tenant can open
// it for the others.
func (g *Grants) write(ctx context.Context, k vault.Key, e vault.Entry) error {
	g.mu.Lock()
	probe := !g.failed.IsZero()
	if probe && (g.probing || g.clock.Now().Sub(g.failed) < writeRetry) {
		g.mu.Unlock()
		return errWriteSkipped
	}
	if probe {
		g.probing = true
		defer func() { // also when Put panics (the relay recovers): else no write is tried again
			g.mu.Lock()
			g.probing = false
			g.mu.Unlock()
		}()
	}
	g.mu.Unlock()
	err := g.vault.Put(context.WithoutCancel(ctx), k, e)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failed = time.Time{}
	if err != nil {
		g.failed = g.clock.Now()
	}
	return err
}

// poster is the record Posted kept of message in chat (none when there is
// none), looked up for asker; err (an UnavailableError, which says so) when the store could
// not tell. A record this instance stored or read lately is known without
// a store read (for half its TTL, and never past its expiry in the vault:
// a message's poster never changes), so edit-based streaming of a message
// costs no read per edit. The store's answer that there is none is not
// kept: a record of the id may be stored on another instance since (a
// claimant that probed an id not yet posted, then let the chat go, would
// otherwise edit the answer another tenant posts later under that id).
func (g *Grants) poster(ctx context.Context, chat, message, asker string) (poster, error) {
	k := g.postedKey(chat, message, vault.KindPostedMessage)
	if p, ok := g.kept(k); ok {
		return p, nil
	}
	e, ok, err := vault.Lookup(ctx, g.vault, k)
	if err != nil {
		return poster{}, UnavailableError(g.platform + ": the message's poster could not be looked up; retry later")
	}
	if !ok {
		return poster{}, nil
	}
	p := poster{tenant: e.Ref, stored: e.Stored, created: e.Created}
	until := e.Stored.Add(vault.ChatGrantTTL)
	if half := g.clock.Now().Add(vault.ChatGrantTTL / 2); half.Before(until) {
		until = half
	}
	g.keep(asker, k, p, until)
	return p, nil
}

// earlier reports whether p was kept for an earlier tenant of its id,
// deleted since (vault.Outdated).
func (g *Grants) earlier(p poster) bool {
	return vault.Outdated(g.vault, p.tenant, p.stored, p.created)
}

// PostedBy is PostedFor, a store that could not tell counting as not.
func (g *Grants) PostedBy(ctx context.Context, chat, message, tenant string) bool {
	mine, _ := g.PostedFor(ctx, chat, message, tenant)
	return mine
}

// PostedFor reports whether the bot posted message in chat for tenant as
// it is now, as Posted recorded it (poster, which looks a message without
// a record up again), or as the mark of a release before this one did
// (tenantMark); err (wrapping ErrUnavailable) when the store could not
// tell. That the store holds no such mark is kept (stored, held by
// tenant), so the mark is read once per message and tenant: kept, it only
// ever answers not, and only an instance of that release, during a
// rolling upgrade, writes such a mark (of a message posted through it,
// which its tenant edits through this instance as not its own until the
// kept answer expires).
func (g *Grants) PostedFor(ctx context.Context, chat, message, tenant string) (bool, error) {
	p, err := g.poster(ctx, chat, message, tenant)
	if err != nil {
		return false, err
	}
	if p.tenant == "" {
		k := g.tenantMark(chat, message, tenant)
		if _, ok := g.kept(k); ok {
			return false, nil
		}
		_, ok, err := vault.Lookup(ctx, g.vault, k)
		if err != nil {
			return false, UnavailableError(g.platform + ": the message's poster could not be looked up; retry later")
		}
		if !ok {
			g.keep(tenant, k, poster{}, g.clock.Now().Add(vault.ChatGrantTTL/2))
		}
		return ok, nil
	}
	return p.tenant == tenant && !g.earlier(p), nil
}

// PostedByAnother reports whether the bot posted message in chat for
// another tenant than tenant, or for an earlier tenant of its id, as
// Posted recorded it (poster: a store read, unless this instance keeps
// the record), err (wrapping ErrUnavailable) when the store could not
// tell: in a chat bound to tenant or claimed by it, such a message,
// posted while the other held the chat, is not tenant's to edit, delete
// or rename (Execute) nor its own when quoted (OwnQuote).
func (g *Grants) PostedByAnother(ctx context.Context, chat, message, tenant string) (bool, error) {
	p, err := g.poster(ctx, chat, message, tenant)
	return p.tenant != "" && (p.tenant != tenant || g.earlier(p)), err
}

// OwnQuote reports whether the bot's message quoted by a reply in c
// (reply_to.is_own), posted at posted in chat in (c's id, or the channel
// of a Discord thread's starter message), is tenant's own, tenant being
// the one the reply reaches: in a chat no binding or claim holds, where
// tenants act by grant (author links, rule 3; Discord's dm_tenant holds a
// DM as a grant does), one posted there for tenant as it is now
// (PostedBy; every part of a message is marked, MarkParts); in a chat
// bound to tenant or claimed by it, one posted since tenant's creation,
// not an earlier tenant's of the id (vault.Predates), nor one posted
// before tenant came to hold the chat (Ownership.HeldSince), nor one
// posted there for another tenant while it held the chat
// (PostedByAnother; not when the store could not tell).
func (g *Grants) OwnQuote(ctx context.Context, own *Ownership, c Chat, in, message, tenant string, posted time.Time) bool {
	if _, held := own.Holder(c); !held {
		return g.PostedBy(ctx, in, message, tenant)
	}
	another, err := g.PostedByAnother(ctx, in, message, tenant)
	return !vault.Predates(g.vault, tenant, posted) && !posted.Before(own.HeldSince(c)) && !another && err == nil
}

// posterKey is the vault key of the record naming (Ref) the tenant a
// prompt message in chat was posted for (Prompted).
func (g *Grants) posterKey(chat, message string) vault.Key {
	return g.postedKey(chat, message, vault.KindPromptPoster)
}

// Prompted records, beside Posted's mark in a chat held by grant and for
// longer (vault.PromptPosterTTL), that the prompt message in chat was
// posted for tenant as created at created (as Execute authorized its op),
// so a press of it finds its poster (PromptPoster). It is stored even when
// ctx ended, as Posted's mark is, and tried also while the store is
// spared (write): its prompt is posted once, and a press of a prompt whose
// record is not stored is dropped for the prompt's whole life.
func (g *Grants) Prompted(ctx context.Context, chat, message, tenant string, created time.Time) {
	e := vault.Entry{Ref: tenant, Stored: g.clock.Now(), Created: created}
	if err := g.vault.Put(context.WithoutCancel(ctx), g.posterKey(chat, message), e); err != nil {
		g.log.Warn("prompt poster not remembered", "platform", g.platform, "chat_id", chat, "message_id", message, "tenant", tenant, "err", err)
	}
}

// PromptPoster is the tenant a button press by user of the prompt message
// in chat answers, where it routes to home (by grant, in its DM or a chat
// no binding or claim covers; else its chat's tenant): the tenant Prompted
// recorded (one store read), when it is home, or one user is linked to
// or, in a DM, any, while it may act in chat. ok is false
// when there is none: the prompt is another tenant's, or an earlier
// tenant's of the id (vault.Outdated), or was not recorded (posted over
// vault.PromptPosterTTL ago, or not by grant), or the store could not
// tell (err, wrapping ErrUnavailable). created is the tenant's creation
// as the record keeps it (as the record was judged, when it keeps none).
func (g *Grants) PromptPoster(ctx context.Context, own *Ownership, user string, chat Chat, message, home string) (tenant string, created time.Time, ok bool, err error) {
	e, ok, err := vault.Lookup(ctx, g.vault, g.posterKey(chat.ID, message))
	t := e.Ref
	switch {
	case err != nil:
		return "", time.Time{}, false, fmt.Errorf("%s: prompt poster: %w", g.platform, ErrUnavailable)
	case !ok || vault.Outdated(g.vault, t, e.Stored, e.Created):
		return "", time.Time{}, false, nil
	}
	created = cmp.Or(e.Created, vault.Creation(g.vault, t))
	if t == home {
		return t, created, true, nil
	}
	if linked := own.Linked(user, t); (linked || chat.DM) && own.MayAct(t, chat, func() bool { return linked || g.Has(ctx, chat.ID, t) }) {
		return t, created, true, nil
	}
	return "", time.Time{}, false, nil
}

// PromptedByEarlier reports whether the record Prompted kept of the
// prompt message in chat names an earlier tenant of tenant's id
// (vault.Outdated: an op that outlived it). No record, or another
// tenant's, is not; err (wrapping ErrUnavailable) is set when the store
// could not tell.
func (g *Grants) PromptedByEarlier(ctx context.Context, chat, message, tenant string) (bool, error) {
	e, ok, err := vault.Lookup(ctx, g.vault, g.posterKey(chat, message))
	if err != nil {
		return false, fmt.Errorf("%s: prompt poster: %w", g.platform, ErrUnavailable)
	}
	return ok && e.Ref == tenant && vault.Outdated(g.vault, tenant, e.Stored, e.Created), nil
}

// Linker redeems the account-link codes users send the bot in a DM
// ("/link <code>", Hermes contract §3): it links (platform, userID) to the
// tenant that issued the code. The user id is the platform's own, off the
// observed DM, never anything a gateway said.
type Linker interface {
	// Link returns the tenant the user is now linked to and the creation
	// of it that issued the code (zero: unknown), or an error (unknown,
	// used or expired code; the store unreachable).
	Link(ctx context.Context, platform, userID, code string) (tenant string, created time.Time, err error)
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

// RedeemLink redeems code for user's account on platform name through
// d.Linker and returns the reply to send in the DM. It counts the consumed
// DM (Metrics.Dropped: link_consumed, link_refused or link_failed), logs a
// failure other than a refused code, and on success calls grant with the
// tenant the user is now linked to and its creation that issued the code
// (zero: unknown), unless that tenant was made again since it issued the
// code: the new tenant of the id is granted nothing.
func (d *Deps) RedeemLink(ctx context.Context, name, user, code string, grant func(tenant string, created time.Time)) string {
	tenant, created, err := d.Linker.Link(ctx, name, user, code)
	reply, reason := LinkedReply, "link_consumed"
	switch {
	case errors.Is(err, ErrLinkRefused):
		reply, reason = LinkFailReply, "link_refused"
	case err != nil:
		reply, reason = LinkErrorReply, "link_failed"
		d.Log.Warn(name+" /link not redeemed", "user_id", user, "err", err)
	case created.IsZero() || !vault.Earlier(d.Vault, tenant, created):
		grant(tenant, created)
	}
	d.Metrics.Dropped(name, reason)
	return reply
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
		rest = strings.TrimLeftFunc(rest, func(r rune) bool { return !unicode.IsSpace(r) }) // up to the space after "@botname"
	}
	if r, _ := utf8.DecodeRuneInString(rest); rest != "" && !unicode.IsSpace(r) {
		return "", false // "/linked", "/links", …
	}
	return strings.TrimSpace(rest), true
}
