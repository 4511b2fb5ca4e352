package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/platform"
	"connector/platform/nexscope"
	"connector/relay"
	"connector/session"
	"connector/vault"
)

// nexscopeDriver drives events as nexscope room members: one room per
// tenant, bound to it, with one member that sends msgs addressed to the bot.
type nexscopeDriver struct {
	token   string
	members []*websocket.Conn
	errors  atomic.Int64 // error frames (a msg not bridged) and broken member connections
	closing atomic.Bool
	readers sync.WaitGroup
	msg     []byte
}

// nexscopeRoom names tenant i's room.
func nexscopeRoom(i int) string { return "room-" + strconv.Itoa(i) }

// newPlatform builds the nexscope platform with a room bound to each tenant.
func (d *nexscopeDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	rooms := make([]nexscope.Room, len(tenants))
	for i, t := range tenants {
		rooms[i] = nexscope.Room{Name: nexscopeRoom(i), Tenant: t.ID}
	}
	return nexscope.New(nexscope.Config{Token: d.token, Rooms: rooms}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants),
	})
}

// connect joins one member per room and waits for each one's presence.
func (d *nexscopeDriver) connect(baseURL string, rooms int) error {
	wsBase := "ws" + strings.TrimPrefix(baseURL, "http")
	for i := range rooms {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		url := fmt.Sprintf("%s/ws/%s?name=member%d&token=%s&v=1", wsBase, nexscopeRoom(i), i, d.token)
		ws, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			cancel()
			return fmt.Errorf("nexscope member %d: %w", i, err)
		}
		_, first, err := ws.Read(ctx)
		cancel()
		if err != nil || !bytes.Contains(first, []byte(`"presence"`)) {
			_ = ws.CloseNow()
			return fmt.Errorf("nexscope member %d: no presence (%v): %.200s", i, err, first)
		}
		d.members = append(d.members, ws)
		d.readers.Go(func() { d.read(ws) })
	}
	return nil
}

// read drains a member's frames (acks, presence), counting error frames.
func (d *nexscopeDriver) read(ws *websocket.Conn) {
	for {
		_, msg, err := ws.Read(context.Background())
		if err != nil {
			if !d.closing.Load() {
				d.errors.Add(1)
			}
			return
		}
		if bytes.Contains(msg, []byte(`"type":"error"`)) {
			d.errors.Add(1)
		}
	}
}

// fire sends event seq from the next member, addressed to the bot; the
// pacer calls it from one goroutine, the members' only writer.
func (d *nexscopeDriver) fire(seq int, at time.Time) error {
	i := seq % len(d.members)
	m := append(d.msg[:0], `{"type":"msg","msgId":"m`...)
	m = strconv.AppendInt(m, int64(seq), 10)
	m = append(m, `","from":"member`...)
	m = strconv.AppendInt(m, int64(i), 10)
	m = append(m, `","to":["`...)
	m = append(m, nexscope.DefaultBotName...)
	m = append(m, `"],"role":"user","threadId":"thread-`...)
	m = strconv.AppendInt(m, int64((seq/len(d.members))%sessionsPerGateway), 10)
	m = append(m, `","text":`...)
	text := append(appendStamp(nil, at), messageBody...)
	m = session.AppendJSONString(m, string(text))
	m = append(m, `,"hopCount":0,"attachments":[]}`...)
	d.msg = m
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return d.members[i].Write(ctx, websocket.MessageText, m)
}

// failures implements eventDriver.
func (d *nexscopeDriver) failures() int64 { return d.errors.Load() }

func (d *nexscopeDriver) close() {
	d.closing.Store(true)
	for _, ws := range d.members {
		_ = ws.Close(websocket.StatusNormalClosure, "")
	}
	d.readers.Wait()
}
