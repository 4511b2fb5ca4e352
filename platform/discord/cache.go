package discord

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/bwmarrin/discordgo"
	lru "github.com/hashicorp/golang-lru/v2"
)

// chanInfo is what normalization needs to know about a channel or thread.
type chanInfo struct {
	ID       string
	Type     discordgo.ChannelType
	GuildID  string
	Name     string
	ParentID string
	// Topic is "" when absent or whitespace only (the adapter reads such a
	// topic as None).
	Topic string
	// Recipient is a DM channel's user: from Discord's channel object, or
	// the author of a message or interaction delivered from it; "" when
	// unknown (then the DM tenant may not act there: channelTenant).
	Recipient string
}

func infoFrom(c *wireChannel) chanInfo {
	topic := c.Topic
	if strings.TrimSpace(topic) == "" {
		topic = ""
	}
	ci := chanInfo{ID: c.ID, Type: c.Type, GuildID: c.GuildID, Name: c.Name, ParentID: c.ParentID, Topic: topic}
	if c.Type == discordgo.ChannelTypeDM && len(c.Recipients) == 1 && isSnowflake(c.Recipients[0].ID) {
		ci.Recipient = c.Recipients[0].ID
	}
	return ci
}

func (c chanInfo) isThread() bool {
	return c.Type == discordgo.ChannelTypeGuildNewsThread || c.Type == discordgo.ChannelTypeGuildPublicThread || c.Type == discordgo.ChannelTypeGuildPrivateThread
}

// threadParent is the channel a thread is in, and "" for any other chat: a
// channel's category is no parent in the ownership order (a claim holds
// the claimed chat and a claimed channel's threads, not the channels filed
// under a claimed category).
func (c chanInfo) threadParent() string {
	if c.isThread() {
		return c.ParentID
	}
	return ""
}

func (c chanInfo) isForum() bool {
	return c.Type == discordgo.ChannelTypeGuildForum || c.Type == discordgo.ChannelTypeGuildMedia
}

// errNotFound reports a channel or guild that does not exist or that the bot
// cannot see.
var errNotFound = errors.New("not found")

// lookup is what normalization consults besides the event itself: the live
// cache (filled from Gateway events, REST on a miss) or a fixture's context.
type lookup interface {
	channel(ctx context.Context, id string) (chanInfo, error)
	guildName(ctx context.Context, id string) (string, error)
	participates(threadID string) bool
}

// Cache sizes. Channels and threads of every guild the bot is in are kept;
// the bounds only matter for very large deployments, where the least recently
// used entries fall back to REST.
const (
	maxCachedChannels = 200_000
	maxParticipation  = 100_000
)

// cache is the channel/thread/guild state discord.py would keep, fed by
// GUILD_CREATE, CHANNEL_* and THREAD_* events and filled by REST on a miss.
type cache struct {
	chans   *lru.Cache[string, chanInfo]
	joined  *lru.Cache[string, struct{}]
	fetch   *Platform // reads what the cache misses from Discord's REST API
	guildMu sync.RWMutex
	guilds  map[string]string
}

func newCache(f *Platform) *cache {
	chans, _ := lru.New[string, chanInfo](maxCachedChannels) // size > 0: cannot fail
	joined, _ := lru.New[string, struct{}](maxParticipation)
	return &cache{chans: chans, joined: joined, fetch: f, guilds: make(map[string]string)}
}

func (c *cache) putChannel(ch *wireChannel) {
	if ch == nil || ch.ID == "" {
		return
	}
	ci := infoFrom(ch)
	if old, ok := c.chans.Peek(ch.ID); ok && ci.Type == discordgo.ChannelTypeDM && ci.Recipient == "" && old.Type == ci.Type {
		ci.Recipient = old.Recipient // a DM channel's user never changes
	}
	c.chans.Add(ch.ID, ci)
}

// rememberDM records id as user's DM channel: added when the cache does
// not know it, its recipient filled in when the cache holds the DM channel
// without one. A channel the cache knows otherwise is left as it is.
func (c *cache) rememberDM(id, user string) {
	if !isSnowflake(id) || !isSnowflake(user) {
		return
	}
	if old, ok := c.chans.Peek(id); ok && (old.Type != discordgo.ChannelTypeDM || old.Recipient != "") {
		return
	}
	c.chans.Add(id, chanInfo{ID: id, Type: discordgo.ChannelTypeDM, Recipient: user})
}

func (c *cache) putGuild(id, name string) {
	if id == "" {
		return
	}
	c.guildMu.Lock()
	c.guilds[id] = name
	c.guildMu.Unlock()
}

// dropGuilds forgets the guilds the bot is no longer in (gone), their
// channels and threads with them: they belong to no tenant (ChatTenant)
// until a GUILD_CREATE brings a guild back.
func (c *cache) dropGuilds(gone func(guildID string) bool) {
	c.guildMu.Lock()
	maps.DeleteFunc(c.guilds, func(id, _ string) bool { return gone(id) })
	c.guildMu.Unlock()
	for _, k := range c.chans.Keys() {
		if ci, ok := c.chans.Peek(k); ok && ci.GuildID != "" && gone(ci.GuildID) {
			c.chans.Remove(k)
			c.leave(k)
		}
	}
}

func (c *cache) join(threadID string) {
	if threadID != "" {
		c.joined.Add(threadID, struct{}{})
	}
}

func (c *cache) leave(threadID string) { c.joined.Remove(threadID) }

func (c *cache) participates(threadID string) bool { return c.joined.Contains(threadID) }

func (c *cache) cachedChannel(id string) (chanInfo, bool) { return c.chans.Get(id) }

func (c *cache) channel(ctx context.Context, id string) (chanInfo, error) {
	if ci, ok := c.chans.Get(id); ok {
		return ci, nil
	}
	if !isSnowflake(id) {
		return chanInfo{}, errNotFound
	}
	wc, err := c.fetch.fetchChannel(ctx, id)
	if err != nil {
		return chanInfo{}, err
	}
	c.putChannel(&wc)
	return infoFrom(&wc), nil
}

func (c *cache) guildName(ctx context.Context, id string) (string, error) {
	c.guildMu.RLock()
	name, ok := c.guilds[id]
	c.guildMu.RUnlock()
	if ok && name != "" {
		return name, nil
	}
	if !isSnowflake(id) {
		return "", errNotFound
	}
	name, err := c.fetch.fetchGuildName(ctx, id)
	if err != nil {
		return "", err
	}
	c.putGuild(id, name)
	return name, nil
}
