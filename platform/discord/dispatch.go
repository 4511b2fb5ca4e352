package discord

import (
	"cmp"
	"encoding/json"
	"time"

	"github.com/bwmarrin/discordgo"
)

// Gateway dispatches the cache keeps up with.
type wireThreadMember struct {
	ID     string `json:"id"` // thread id (absent inside a channel object)
	UserID string `json:"user_id"`
}

type wireGuild struct {
	ID       string        `json:"id"`
	Name     string        `json:"name"`
	Channels []wireChannel `json:"channels"`
	Threads  []wireThread  `json:"threads"`
}

type wireThread struct {
	wireChannel
	Member *wireThreadMember `json:"member"`
}

type wireThreadListSync struct {
	Threads []wireChannel      `json:"threads"`
	Members []wireThreadMember `json:"members"`
}

type wireThreadMembersUpdate struct {
	ID               string             `json:"id"`
	AddedMembers     []wireThreadMember `json:"added_members"`
	RemovedMemberIDs []string           `json:"removed_member_ids"`
}

// onDispatch handles one Gateway dispatch on discordgo's reader goroutine
// (SyncEvents), so dispatches are seen in order: state events update the
// cache at once; messages are decoded and queued to the ingest shard of
// their channel; interactions are handed to their own admission goroutine
// (gatewayInteraction) and acknowledged and processed like webhook ones.
// Nothing here waits on the network; only a full ingest queue blocks.
func (p *Platform) onDispatch(typ string, raw json.RawMessage) {
	switch typ {
	case "READY":
		var r discordgo.Ready
		err := json.Unmarshal(raw, &r)
		if err == nil && r.User != nil && r.User.ID != "" {
			id := r.User.ID
			p.botID.Store(&id)
		}
		p.gw.budget.record()
		p.cmds.sessionStarted()
		if err == nil {
			p.readySnapshot(&r)
		}
	case "GUILD_CREATE", "GUILD_UPDATE":
		var g wireGuild
		if json.Unmarshal(raw, &g) != nil {
			return
		}
		p.cache.putGuild(g.ID, g.Name)
		for i := range g.Channels {
			c := &g.Channels[i]
			c.GuildID = cmp.Or(c.GuildID, g.ID) // GUILD_CREATE's channels omit it
			p.cache.putChannel(c)
		}
		for i := range g.Threads {
			p.putThread(&g.Threads[i], g.ID)
		}
		p.guildSettled(g.ID)
		p.cmds.guildDelivered(g.ID)
	case "GUILD_DELETE":
		var g struct {
			ID          string `json:"id"`
			Unavailable bool   `json:"unavailable"`
		}
		if json.Unmarshal(raw, &g) != nil {
			return
		}
		if !g.Unavailable { // the bot left it (not an outage)
			p.cache.dropGuilds(func(id string) bool { return id == g.ID })
			p.cmds.guildLeft(g.ID)
		}
		// Left, or in an outage (Discord says so after READY instead of a
		// GUILD_CREATE): no GUILD_CREATE of it to wait for.
		p.guildSettled(g.ID)
	case "CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE":
		var t wireThread
		if json.Unmarshal(raw, &t) == nil {
			p.putThread(&t, "")
		}
	case "CHANNEL_DELETE", "THREAD_DELETE":
		var c wireChannel
		if json.Unmarshal(raw, &c) == nil {
			p.cache.chans.Remove(c.ID)
			p.cache.leave(c.ID)
		}
	case "THREAD_LIST_SYNC":
		var s wireThreadListSync
		if json.Unmarshal(raw, &s) != nil {
			return
		}
		for i := range s.Threads {
			p.cache.putChannel(&s.Threads[i])
		}
		for _, m := range s.Members {
			if m.UserID == p.bot() {
				p.cache.join(m.ID)
			}
		}
	case "THREAD_MEMBER_UPDATE":
		var m wireThreadMember
		if json.Unmarshal(raw, &m) == nil && (m.UserID == "" || m.UserID == p.bot()) {
			p.cache.join(m.ID)
		}
	case "THREAD_MEMBERS_UPDATE":
		var u wireThreadMembersUpdate
		if json.Unmarshal(raw, &u) != nil {
			return
		}
		for _, m := range u.AddedMembers {
			if m.UserID == p.bot() {
				p.cache.join(u.ID)
			}
		}
		for _, id := range u.RemovedMemberIDs {
			if id == p.bot() {
				p.cache.leave(u.ID)
			}
		}
	case "MESSAGE_CREATE", "MESSAGE_UPDATE":
		p.enqueueMessage(typ == "MESSAGE_UPDATE", raw)
	case "INTERACTION_CREATE":
		p.gatewayInteraction(raw)
	}
}

// readySnapshot forgets the cached guilds READY no longer lists (the bot
// was removed while no session here saw the GUILD_DELETE), and starts
// waiting for the GUILD_CREATE of every claimed guild READY lists (each
// announced as unavailable; a GUILD_CREATE with its channels follows for
// each).
func (p *Platform) readySnapshot(r *discordgo.Ready) {
	listed := make([]string, len(r.Guilds))
	in := make(map[string]bool, len(r.Guilds))
	for i, g := range r.Guilds {
		listed[i] = g.ID
		in[g.ID] = true
	}
	p.cache.dropGuilds(func(id string) bool { return !in[id] })
	claimed := func(id string) bool { _, ok := p.guildOwners()[id]; return ok }
	if p.snap.ready(p.clock.Now(), listed, claimed) {
		p.log.Info("discord guild snapshot loaded")
	}
}

// guildSettled records that guildID's snapshot wait is over
// (snapshot.created), logging the first snapshot's completion.
func (p *Platform) guildSettled(guildID string) {
	if p.snap.created(guildID) {
		p.log.Info("discord guild snapshot loaded")
	}
}

// putThread caches a channel or thread; the bot takes part in threads it
// owns or is a member of.
func (p *Platform) putThread(t *wireThread, guildID string) {
	t.GuildID = cmp.Or(t.GuildID, guildID)
	p.cache.putChannel(&t.wireChannel)
	if bot := p.bot(); bot != "" && (t.OwnerID == bot || t.Member != nil) {
		p.cache.join(t.ID)
	}
}

// ingestItem is a message waiting for normalization.
type ingestItem struct {
	msg      wireMessage
	edit     bool
	received time.Time
}

// maxIngesting bounds the messages being ingested or waiting for their
// channel's turn; past it the Gateway reader waits.
const maxIngesting = 1024

// enqueueMessage gives a message its channel's turn: the messages of one
// channel are ingested in Gateway order, those of other channels side by
// side (chatorder), so a slow step of one channel never delays another.
func (p *Platform) enqueueMessage(edit bool, raw json.RawMessage) {
	it := ingestItem{edit: edit, received: p.clock.Now()}
	if err := json.Unmarshal(raw, &it.msg); err != nil {
		p.metrics.Dropped(platformName, "malformed")
		p.log.Warn("discord message dispatch not decodable", "err", err)
		return
	}
	life := p.enter() // Run's turns.Wait follows its stop
	if life == nil {
		return
	}
	defer p.work.Done()
	// Blocking here stalls the Gateway reader: Discord then resumes the
	// session and replays, so nothing is lost.
	p.turns.Go(life.ctx, it.msg.ChannelID, func() { p.ingestMessage(life.ctx, &it) })
}
