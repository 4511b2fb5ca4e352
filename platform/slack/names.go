package slack

import (
	"context"
	"errors"
	"time"

	"github.com/slack-go/slack"

	"connector/internal/ttlcache"
	"connector/platform"
)

// This file resolves the names a source carries (users.info,
// conversations.info), a thread's history (threadcontext.go, where the
// wake check finds its root) and a reacted-to message for live ingest,
// cached with a bound, as the native adapter does (_resolve_user_name,
// _parse_users_info, _resolve_channel_name, _bot_authored_thread_root).
// Any failure resolves to the id, never to an error: a name is never worth
// a lost message.

// Bounds of the caches (the native adapter keeps 5,000 names of each
// kind), and how long entries live: a failed lookup is kept as its id, as
// natively, but only for failedTTL. A lookup waits at most lookupDeadline
// (for the method's budget too): an event must be stored within Slack's
// 3 s.
const (
	nameCacheSize  = 5000
	nameCacheTTL   = time.Hour
	failedTTL      = time.Minute
	lookupDeadline = 750 * time.Millisecond
)

// parseUser is _parse_users_info: the display name, then the profile's
// real name, the user's real name, the handle, else the id; a bot or
// workflow bot, or a profile with a bot_id, is a bot.
func parseUser(u *slack.User, id string) userInfo {
	name := id
	for _, n := range []string{u.Profile.DisplayName, u.Profile.RealName, u.RealName, u.Name} {
		if n != "" {
			name = n
			break
		}
	}
	return userInfo{name: name, isBot: u.IsBot || u.IsWorkflowBot || u.Profile.BotID != ""}
}

// channelName is _resolve_channel_name on an answered conversation: an
// IM is its peer's name (peer resolves it), anything else its name, else
// its normalized name, else the id.
func channelName(ch *slack.Channel, id string, peer func(string) string) string {
	switch {
	case ch.IsIM && ch.User != "":
		return peer(ch.User)
	case ch.IsIM:
		return id
	case ch.Name != "":
		return ch.Name
	case ch.NameNormalized != "":
		return ch.NameNormalized
	}
	return id
}

// names is the live lookups: the Web API with the workspace's token,
// cached per workspace.
type names struct {
	p      *Platform
	users  *ttlcache.Cache[string, userInfo]
	chans  *ttlcache.Cache[string, string]
	failed *ttlcache.Cache[string, struct{}] // lookups that failed lately, by the key of their cache
}

var _ lookups = (*names)(nil)

func newNames(p *Platform) *names {
	return &names{
		p:      p,
		users:  ttlcache.New[string, userInfo](nameCacheSize, nameCacheTTL, p.clock),
		chans:  ttlcache.New[string, string](nameCacheSize, nameCacheTTL, p.clock),
		failed: ttlcache.New[string, struct{}](nameCacheSize, failedTTL, p.clock),
	}
}

func (n *names) user(ctx context.Context, team, id string) userInfo {
	if id == "" {
		return userInfo{}
	}
	info, ok := lookup(ctx, n.p, n.users, team, id, "users.info", lookupDeadline, func(ctx context.Context, c *slack.Client) (userInfo, error) {
		u, err := c.GetUserInfoContext(ctx, id)
		if err != nil {
			return userInfo{}, err
		}
		return parseUser(u, id), nil
	})
	if !ok {
		return userInfo{name: id}
	}
	return info
}

func (n *names) channelName(ctx context.Context, team, id string) string {
	name, ok := lookup(ctx, n.p, n.chans, team, id, "conversations.info", lookupDeadline, func(lctx context.Context, c *slack.Client) (string, error) {
		ch, err := c.GetConversationInfoContext(lctx, &slack.GetConversationInfoInput{ChannelID: id})
		if err != nil {
			return "", err
		}
		return channelName(ch, id, func(peer string) string { return n.user(ctx, team, peer).name }), nil
	})
	if !ok {
		return id
	}
	return name
}

// lookup returns what method answered about id in workspace team (fetch,
// within deadline), cached for the cache's TTL. Any failure is logged and
// answered ok false, and is not asked again for failedTTL, unless Slack
// was not asked or did not answer in time (the asking tenant's share of
// the budget, or the deadline, ran out): that says nothing of id, and is
// the asker's, not every tenant's of the workspace.
func lookup[V any](ctx context.Context, p *Platform, cache *ttlcache.Cache[string, V], team, id, method string, deadline time.Duration, fetch func(context.Context, *slack.Client) (V, error)) (V, bool) {
	key := team + "/" + id
	if v, ok := cache.Get(key); ok {
		return v, true
	}
	var v V
	if p.names.failed.Contains(method + " " + key) {
		return v, false
	}
	ctx, cancel := within(ctx, p.clock, deadline)
	defer cancel()
	err := p.call(ctx, team, method, func(ctx context.Context, c *slack.Client) (err error) {
		v, err = fetch(ctx, c)
		return err
	})
	if err != nil {
		p.log.Debug("slack "+method+" failed", "team", team, "id", id, "err", p.errorText(err))
		if limited := (*platform.RateLimitedError)(nil); !errors.As(err, &limited) && ctx.Err() == nil {
			p.names.failed.Add(method+" "+key, struct{}{})
		}
		return v, false
	}
	cache.Add(key, v)
	return v, true
}

func (n *names) reacted(ctx context.Context, team, channel, ts string) ([]slack.Message, bool) {
	ctx, cancel := within(ctx, n.p.clock, lookupDeadline)
	defer cancel()
	var msgs []slack.Message
	err := n.p.call(ctx, team, "conversations.replies", func(ctx context.Context, c *slack.Client) (err error) {
		msgs, _, _, err = c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: channel, Timestamp: ts, Limit: 1, Inclusive: true,
		})
		return err
	})
	if err != nil {
		n.p.log.Debug("slack conversations.replies failed for a reaction", "team", team, "channel", channel, "err", n.p.errorText(err))
	}
	return msgs, err == nil && len(msgs) > 0
}
