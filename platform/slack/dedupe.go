package slack

import (
	"context"
	"time"
)

// This file keeps Slack's duplicates out: a retried delivery
// (X-Slack-Retry-Num, a Socket Mode redelivery), a press seen twice, a
// slash command request replayed (its trigger_id),
// and the message and app_mention events one mention produces (they share
// the message's team, channel and ts: the native dedupe key "<team>:<ts>"
// qualified by the channel, as a ts is unique in its channel only; for
// DedupeWindow). The markers are platform.Dedupe's, in the platform's
// claims: the store's with several instances, so a duplicate is dropped
// whichever instance gets it; in memory with one. A copy another instance
// is handling is platform.ErrBusy: HTTP 503, a Socket Mode envelope left
// unacknowledged, so Slack tries again later.

// pendingTTL bounds how long a crashed instance's pending claim holds a
// key: longer than handling a message may take, its files' downloads
// (mediaDownloadTimeout) included, or Slack's retry of a message still
// fetching its files would be handled again on another instance.
const pendingTTL = mediaDownloadTimeout + time.Minute

// localClaims bounds the claims kept in process memory: past it the least
// recently used are forgotten, which may let a late duplicate through but
// never loses an event.
const localClaims = 500_000

// once handles the first copy of key with handle (platform.Dedupe.Once),
// counting a duplicate as dropped (eventID names it).
func (p *Platform) once(ctx context.Context, key, eventID string, handle func() error) error {
	dup, err := p.dedupe.Once(ctx, key, handle)
	if dup {
		p.drop(dropDuplicate, eventID)
	}
	return err
}
