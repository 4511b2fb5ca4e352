package relaytest

import (
	"slices"

	"connector/session"
)

// stockPlatforms are the platform values the stock gateway knows
// (hermes-wire.md §6.2, the Platform enum of gateway/config.py). It reads any
// other source.platform of an inbound event as "relay".
var stockPlatforms = []string{
	"local", "telegram", "discord", "whatsapp", "whatsapp_cloud", "slack", "signal",
	"mattermost", "matrix", "homeassistant", "email", "sms", "dingtalk", "api_server",
	"webhook", "msgraph_webhook", "feishu", "wecom", "wecom_callback", "weixin",
	"bluebubbles", "qqbot", "yuanbao", "relay",
}

// StockSessionKey is the session key a stock gateway (no platform plugins)
// running with opts computes for an inbound event whose source is src: it
// first reads an unknown platform as "relay", as _event_from_wire does, then
// keys the source. Tests use it to play the gateway's side of interrupts.
func StockSessionKey(src session.Source, opts session.Options) string {
	if !slices.Contains(stockPlatforms, src.Platform) {
		src.Platform = session.PlatformRelay
	}
	return session.Key(&src, opts)
}
