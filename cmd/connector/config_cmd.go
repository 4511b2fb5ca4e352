package main

import (
	"fmt"
	"io"
)

// configCmd prints configuration help: "example", a commented config file.
func configCmd(args []string, stdout, stderr io.Writer) int {
	const synopsis = "connector config example"
	sub := ""
	if len(args) > 0 && args[0] == "example" {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("config", synopsis, "Prints a commented example config file (every key: docs/configuration.md).")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if sub == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: %s\n", synopsis)
		return 2
	}
	fmt.Fprint(stdout, exampleConfig)
	return 0
}

// exampleConfig is the commented example of docs/configuration.md and
// connector config example.
const exampleConfig = `# connector.yaml: every key is in docs/configuration.md.
listen: 127.0.0.1:8080          # public: /relay, the webhooks, nexscope, /healthz; behind a reverse proxy
                                #   that terminates TLS (docs/guides/tls.md), or set tls and listen: 0.0.0.0:443
ops: {listen: 127.0.0.1:9090}   # private: /metrics, /readyz, /platforms
shutdown_grace: 30s
log: {level: info, format: json}
http: {body_timeout: 10s, idle_timeout: 60s}   # limits before a client authenticates
# Secrets may stay out of this file: CONNECTOR_GATEWAY_SECRETS_ACME_GW1=..., DISCORD_BOT_TOKEN=...
tenants:
  - id: acme
    gateways:
      - id: acme-gw1
        secrets: ["change-me-long-random", "previous-secret-during-rotation"]
    session: {group_sessions_per_user: true}
  - id: globex
    gateways:
      - id: globex-gw
        secrets: ["another-long-random-secret"]
    session: {nexscope_key_platform: nexscope}   # its gateways have a nexscope platform plugin
discord:
  application_id: "1310000000000000000"
  public_key: "<64 hex digits from the developer portal>"
  # bot_token from DISCORD_BOT_TOKEN
  guilds: {"1310000000000000500": acme, "1310000000000000600": globex}
  dm_tenant: acme
telegram:
  # bot_token from TELEGRAM_BOT_TOKEN; long polling without webhook_url
  chats: {"-1001234567890": acme, "-1009876543210": globex}
whatsapp:
  # app_secret, verify_token and access_token from WHATSAPP_APP_SECRET,
  # WHATSAPP_VERIFY_TOKEN and WHATSAPP_ACCESS_TOKEN; Meta posts to /whatsapp/webhook
  phone_numbers: {"106540352242922": acme, "206540352242922": globex}   # phone number ids
  allow_all_users: true        # dm_policy open admits everyone only with this, as natively
nexscope:
  # token from NEXSCOPE_TOKEN
  rooms:
    - {name: default, tenant: acme}
    - {name: globex-room, tenant: globex}
`
