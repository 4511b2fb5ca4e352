package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"connector/internal/wsconn"
	"connector/platform"
	"connector/platform/telegram"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/vault"
)

// telegramDriver drives events as Telegram long polling hands them over:
// text messages queued on a fake Bot API (telegramtest), which answers the
// platform's getUpdates with up to 100 of them at once. One private chat
// per tenant, from one user: each tenant's events are one sequential
// source (one chat, one session), the case where every event used to wait
// for its own commit. Latency runs from the scheduled enqueue to the
// gateway's read.
type telegramDriver struct {
	fake     *telegramtest.Server
	platform *telegram.Platform
	chats    []int64 // per tenant
	failed   atomic.Int64
	progress chan struct{}
}

// newPlatform starts the fake Bot API and builds the long-polling platform
// with a chat per tenant.
func (d *telegramDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	token := "424242:" + randomToken()
	d.fake = telegramtest.NewServer(token)
	chats := make(map[string]string, len(tenants))
	for i, t := range tenants {
		id := int64(700_000_000 + i)
		chats[strconv.FormatInt(id, 10)] = t.ID
		d.chats = append(d.chats, id)
	}
	p, err := telegram.New(telegram.Config{
		BotToken: token, APIServerURL: d.fake.URL, Chats: chats,
		GlobalPerSecond: -1, ChatPerSecond: -1, GroupPerMinute: -1,
	}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Metrics: d,
	})
	d.platform = p
	return p, err
}

// start waits until the platform long-polls; progress is signalled when
// the platform drops an event.
func (d *telegramDriver) start(progress chan struct{}) error {
	d.progress = progress
	timeout := time.NewTimer(dialTimeout)
	defer timeout.Stop()
	for {
		st, changed := d.platform.StatusChanges()
		if st.Ready {
			return nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return fmt.Errorf("telegram platform not polling after %v: %s", dialTimeout, st.Detail)
		}
	}
}

// fire queues message seq on the fake Bot API for the next getUpdates.
func (d *telegramDriver) fire(seq int, at time.Time) error {
	chat := d.chats[seq%len(d.chats)]
	text := string(append(appendStamp(nil, at), messageBody...))
	d.fake.Enqueue(fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"date":%d,`+
		`"chat":{"id":%d,"type":"private","first_name":"Bench"},"from":{"id":%d,"is_bot":false,"first_name":"Bench"},"text":%q}}`,
		seq+1, seq+1, at.Unix(), chat, chat, text))
	return nil
}

// failures implements eventDriver: events the platform dropped.
func (d *telegramDriver) failures() int64 { return d.failed.Load() }

// RateLimitWait implements platform.Metrics.
func (*telegramDriver) RateLimitWait(string, time.Duration) {}

// RateLimited implements platform.Metrics.
func (*telegramDriver) RateLimited(string) {}

// Dropped implements platform.Metrics: a dropped event never reaches a
// gateway.
func (d *telegramDriver) Dropped(string, string) {
	d.failed.Add(1)
	wsconn.Signal(d.progress)
}

// close stops the fake Bot API.
func (d *telegramDriver) close() {
	if d.fake != nil {
		d.fake.Close()
	}
}
