package whatsapp

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"connector/internal/nativecfg"
	"connector/internal/nonneg"
	"connector/platform"
	"connector/platform/fairshare"
)

// Config configures the WhatsApp Cloud API platform: one Meta app whose
// business phone numbers belong to tenants. The zero value plus the three
// credentials (AppSecret, VerifyToken, AccessToken) and PhoneNumbers works.
type Config struct {
	// AppSecret is the Meta app's secret: X-Hub-Signature-256 of every
	// webhook POST is the HMAC-SHA256 of the raw body under it. Required. It
	// never appears in logs, errors, metrics or frames.
	AppSecret string `yaml:"app_secret"`
	// VerifyToken is the token Meta sends as hub.verify_token in the GET
	// verification handshake of the webhook subscription; the same value is
	// typed into the app dashboard. Required.
	VerifyToken string `yaml:"verify_token"`
	// AccessToken is the Graph API bearer token (a system user's permanent
	// token with whatsapp_business_messaging). Required. It never appears in
	// logs, errors, metrics or frames.
	AccessToken string `yaml:"access_token"`
	// APIURL is the Graph API's base URL. Default https://graph.facebook.com/;
	// tests point it at a fake.
	APIURL string `yaml:"api_url"`
	// APIVersion is the Graph API version in every call's path. Default
	// v20.0, as the native adapter.
	APIVersion string `yaml:"api_version"`

	// PhoneNumbers maps a business phone number id (metadata.phone_number_id
	// of the webhook, digits) to the tenant that owns it: its messages reach
	// that tenant, and the tenant's sends go out from it. Messages to a number
	// no tenant owns reach a tenant only through a linked author (/link).
	// Default none.
	PhoneNumbers map[string]string `yaml:"phone_numbers"`

	// AllowAllUsers opts the open DM policy in, as the native
	// WHATSAPP_CLOUD_ALLOW_ALL_USERS (and WHATSAPP_ALLOW_ALL_USERS,
	// GATEWAY_ALLOW_ALL_USERS) do: without it dm_policy open admits nobody.
	// Spellings: a YAML boolean, or true/1/yes (anything else is false, as
	// natively). Default false; tenants.<tenant>.allow_all_users overrides it.
	AllowAllUsers *OptIn `yaml:"allow_all_users"`
	// DMPolicy is the native dm_policy: allowlist (only AllowFrom), pairing
	// (everyone; the gateway pairs), open (everyone, only with
	// AllowAllUsers), disabled (nobody); any other value is refused (the
	// native adapter would admit nobody).
	// Default allowlist when AllowFrom is set and AllowAllUsers is not, else
	// open. tenants.<tenant>.dm_policy overrides it.
	DMPolicy string `yaml:"dm_policy"`
	// AllowFrom lists the senders the allowlist policy admits: phone numbers
	// in any spelling ("+44 7700 900123" is 447700900123), or "*". A YAML
	// list or a comma-separated string. Default none; the older name
	// AllowedUsers is read when it is absent. tenants.<tenant>.allow_from
	// overrides it.
	AllowFrom List `yaml:"allow_from"`
	// AllowedUsers is the older name of AllowFrom
	// (WHATSAPP_CLOUD_ALLOWED_USERS), read only when AllowFrom is absent.
	AllowedUsers List `yaml:"allowed_users"`
	// Tenants holds per-tenant overrides of the access knobs above, by the
	// same names, and each tenant's fair-share weight. Default none.
	Tenants map[string]TenantConfig `yaml:"tenants"`

	// GlobalPerSecond is the app's budget in Graph calls per second, shared
	// between tenants by weighted fair share. Meta's application (4),
	// account (80007) and call-limit (613) rate-limit answers hold the sends
	// of the tenant they answered, and its other Graph calls (read marks, media uploads), with a
	// backoff doubling with each answer in a row (1 to 64 s), not the other
	// tenants'. A hold is the instance's that got the answer, and the
	// tenant's as created: one deleted and made again under its id starts
	// unheld. Default 400; negative disables it.
	GlobalPerSecond int `yaml:"global_per_second"`
	// NumberPerSecond is each business number's send budget in messages per
	// second (Meta's default throughput is 80), shared by weighted fair share
	// between the tenants sending from it (one, unless the number is shared
	// through linked users); a throughput answer (130429) holds the sends of
	// the tenant it answered from that number, with the same backoff. Each
	// other tenant sending from a throttled number (or app) gets an answer of
	// its own before it is held, by design: holding them all on one tenant's
	// answer would let that tenant's flood pause them. Default
	// 80; negative disables it.
	NumberPerSecond int `yaml:"number_per_second"`
	// ChatPerSecond caps messages to one user in any one second (Meta's
	// pair rate limit answers 131056 beyond about one message every 6 s on
	// bursts). Default 1; negative disables it.
	ChatPerSecond int `yaml:"chat_per_second"`
	// RequestTimeout bounds an outbound action whose context has no
	// deadline (the gateway itself waits 30 s). Default 30s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// MaxWebhookBytes limits a webhook body; a larger one gets 413. Default
	// 3 MiB (Meta's maximum, as the native adapter).
	MaxWebhookBytes int64 `yaml:"max_webhook_bytes"`
	// MaxInboundMediaBytes limits one inbound attachment fetched from Meta
	// for re-hosting; a larger one reaches gateways as its caption only.
	// Default 100 MiB (Meta's document cap), and never above the media
	// store's own per-object limit.
	MaxInboundMediaBytes int64 `yaml:"max_inbound_media_bytes"`
}

// TenantConfig overrides the access knobs of Config for one tenant's
// numbers, by their native names, and sets its fair-share weight.
type TenantConfig struct {
	// AllowAllUsers overrides allow_all_users for this tenant.
	AllowAllUsers *OptIn `yaml:"allow_all_users"`
	// DMPolicy overrides dm_policy for this tenant.
	DMPolicy string `yaml:"dm_policy"`
	// AllowFrom overrides allow_from for this tenant.
	AllowFrom List `yaml:"allow_from"`
	// AllowedUsers is the older name of AllowFrom, read when it is absent.
	AllowedUsers List `yaml:"allowed_users"`
	// Weight is the tenant's share of GlobalPerSecond relative to other
	// tenants; a tenant's largest weight on any platform is also its share
	// of an instance's session-owner writes (relay, docs/security.md).
	// Default 1; at most 1,000,000.
	Weight int `yaml:"weight"`
}

// OptIn is an allow-all opt-in read as the native adapter reads
// WHATSAPP_CLOUD_ALLOW_ALL_USERS: a YAML boolean, or the text true, 1 or
// yes (case-folded, trimmed); any other text is false.
type OptIn bool

// UnmarshalYAML implements yaml.Unmarshaler.
func (o *OptIn) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a boolean")
	}
	if nativecfg.IsYAML11Bool(n) {
		v, _ := nativecfg.ParseFlag(n.Value, true) // a YAML 1.1 boolean word: cannot fail
		*o = OptIn(v)
		return nil
	}
	s := strings.ToLower(strings.TrimSpace(n.Value))
	*o = OptIn(s == "true" || s == "1" || s == "yes")
	return nil
}

// List is a list knob read as the native adapter reads allow_from: a YAML
// list, or one string of comma-separated entries (nativecfg.List).
type List []string

// UnmarshalYAML implements yaml.Unmarshaler. An explicit empty list stays
// non-nil: natively an allow_from key that is present wins, even empty.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	items, err := nativecfg.List(n)
	if err != nil {
		return err
	}
	*l = append(List{}, nativecfg.Split(items)...)
	return nil
}

// Defaults applied by New to zero fields.
const (
	DefaultAPIURL               = "https://graph.facebook.com/"
	DefaultAPIVersion           = "v20.0"
	DefaultGlobalPerSecond      = 400
	DefaultNumberPerSecond      = 80
	DefaultChatPerSecond        = 1
	DefaultRequestTimeout       = 30 * time.Second
	DefaultMaxWebhookBytes      = 3 << 20
	DefaultMaxInboundMediaBytes = 100 << 20
)

// WebhookPath is where Meta sends the verification handshake (GET) and
// the events (POST).
const WebhookPath = "/whatsapp/webhook"

// platformName is the platform value on the wire, as the native adapter's.
const platformName = "whatsapp_cloud"

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.APIURL = strings.TrimRight(cmp.Or(c.APIURL, DefaultAPIURL), "/")
	c.APIVersion = cmp.Or(c.APIVersion, DefaultAPIVersion)
	c.GlobalPerSecond = cmp.Or(c.GlobalPerSecond, DefaultGlobalPerSecond)
	c.NumberPerSecond = cmp.Or(c.NumberPerSecond, DefaultNumberPerSecond)
	c.ChatPerSecond = cmp.Or(c.ChatPerSecond, DefaultChatPerSecond)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.MaxWebhookBytes = cmp.Or(c.MaxWebhookBytes, DefaultMaxWebhookBytes)
	c.MaxInboundMediaBytes = cmp.Or(c.MaxInboundMediaBytes, DefaultMaxInboundMediaBytes)
	return c
}

// versionPattern is a Graph API version path segment.
var versionPattern = regexp.MustCompile(`^v[0-9]{1,3}\.[0-9]{1,3}$`)

// Validate reports the first invalid field, naming its key (never the value
// of a secret).
func (c Config) Validate() error {
	for key, v := range map[string]string{"app_secret": c.AppSecret, "verify_token": c.VerifyToken, "access_token": c.AccessToken} {
		if err := validSecret(v); err != nil {
			return fmt.Errorf("whatsapp.%s: %w", key, err)
		}
	}
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
			return errors.New("whatsapp.api_url: want an http(s) URL without a query")
		}
	}
	if c.APIVersion != "" && !versionPattern.MatchString(c.APIVersion) {
		return fmt.Errorf("whatsapp.api_version: %q: want v<major>.<minor>, e.g. v20.0", c.APIVersion)
	}
	for _, id := range slices.Sorted(maps.Keys(c.PhoneNumbers)) {
		if !platform.ValidWhatsAppID(id) {
			return fmt.Errorf("whatsapp.phone_numbers[%q]: want a phone number id (digits)", id)
		}
		if c.PhoneNumbers[id] == "" {
			return fmt.Errorf("whatsapp.phone_numbers[%q]: empty tenant", id)
		}
	}
	if _, err := newAccess(c.access(), nil); err != nil {
		return fmt.Errorf("whatsapp.%w", err)
	}
	for _, tenant := range slices.Sorted(maps.Keys(c.Tenants)) {
		tc := c.Tenants[tenant]
		if err := fairshare.CheckWeight(tc.Weight); err != nil {
			return fmt.Errorf("whatsapp.tenants[%q].%w", tenant, err)
		}
		if _, err := newAccess(c.access(), &tc); err != nil {
			return fmt.Errorf("whatsapp.tenants[%q].%w", tenant, err)
		}
	}
	return nonneg.Check("whatsapp.", &c, "global_per_second", "number_per_second", "chat_per_second")
}

// validSecret checks a credential's shape without echoing it: present,
// and nothing that cannot travel in a header.
func validSecret(s string) error {
	if s == "" {
		return errors.New("required")
	}
	for _, r := range s {
		if r <= ' ' || r > '~' {
			return errors.New("contains a space, control or non-ASCII character")
		}
	}
	return nil
}

// access is the top-level access knobs as a TenantConfig.
func (c Config) access() TenantConfig {
	return TenantConfig{AllowAllUsers: c.AllowAllUsers, DMPolicy: c.DMPolicy, AllowFrom: c.AllowFrom, AllowedUsers: c.AllowedUsers}
}
