package discord

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bwmarrin/discordgo"
)

// rest performs one REST call with discordgo (request building, auth,
// typed errors) on a fresh bucket, so discordgo's own limiter neither
// serializes nor sleeps: the transport does all rate limiting under ctx. The
// result, if any, is decoded into out.
func (p *Platform) rest(ctx context.Context, method, endpoint string, body, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	bucket := &discordgo.Bucket{Key: "connector"}
	bucket.Lock() // RequestWithLockedBucket releases it
	resp, err := p.sess.RequestWithLockedBucket(method, endpoint, "application/json", b, bucket, 0,
		discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
	if err != nil {
		return err
	}
	if out != nil && len(resp) > 0 {
		if err := json.Unmarshal(resp, out); err != nil {
			return fmt.Errorf("decode %s answer: %w", method, err)
		}
	}
	return nil
}

// fetchChannel reads channel id for the cache.
func (p *Platform) fetchChannel(ctx context.Context, id string) (wireChannel, error) {
	var c wireChannel
	err := p.rest(ctx, "GET", discordgo.EndpointChannel(id), nil, &c)
	if isNotFound(err) {
		return c, errNotFound
	}
	return c, err
}

// fetchGuildName reads guild id's name for the cache.
func (p *Platform) fetchGuildName(ctx context.Context, id string) (string, error) {
	var g struct {
		Name string `json:"name"`
	}
	err := p.rest(ctx, "GET", discordgo.EndpointGuild(id), nil, &g)
	if isNotFound(err) {
		return "", errNotFound
	}
	return g.Name, err
}
