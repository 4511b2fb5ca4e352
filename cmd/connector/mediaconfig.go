package main

import (
	"errors"
	"net/url"
	"path/filepath"
	"time"

	"connector/media"
)

// MediaConfig is the media store: attachments that cross /relay by
// reference (docs/contract.md "Media"): gateways' uploads for send_media
// and inbound attachments re-hosted from behind a platform credential.
type MediaConfig struct {
	// PublicURL is the base URL gateways reach this connector at: their
	// GATEWAY_RELAY_URL with ws(s) turned into http(s) and /relay dropped,
	// e.g. https://connector.example.com. Inbound attachments behind a
	// platform credential (Telegram files, nexscope files sent to the bot)
	// are re-hosted at <public_url>/relay/media/<id>; without it they
	// reach gateways as their caption only. A send_media source_url on this
	// host names an uploaded object. Default none.
	PublicURL string `yaml:"public_url"`
	// Dir holds the media files (mode 0700; emptied at start). Default the
	// media directory in the data directory (store.path/media).
	Dir string `yaml:"dir"`
	// MaxBytes bounds one upload or re-hosted attachment; a larger upload
	// is answered 413. Default 26214400 (25 MiB, the gateway's own cap).
	MaxBytes int64 `yaml:"max_bytes"`
	// QuotaBytes bounds the bytes of every stored object together; an
	// upload past it is answered 507 once expired objects are removed.
	// Default 1073741824 (1 GiB).
	QuotaBytes int64 `yaml:"quota_bytes"`
	// TenantQuotaBytes bounds one tenant's stored objects. Default
	// 268435456 (256 MiB), or quota_bytes when lower.
	TenantQuotaBytes int64 `yaml:"tenant_quota_bytes"`
	// TTL is how long a stored object can be fetched; gateways download
	// re-hosts on receipt. Default 1h.
	TTL time.Duration `yaml:"ttl"`
	// UploadTimeout bounds reading one upload's body (POST /relay/media);
	// it replaces http.body_timeout on that route. Default 2m.
	UploadTimeout time.Duration `yaml:"upload_timeout"`
	// AllowPrivateURLs lets send_media download a source_url that resolves
	// to a loopback, private or link-local address. Off by default: a
	// gateway must not reach the connector's own network through it.
	AllowPrivateURLs bool `yaml:"allow_private_urls"`
}

// validateMedia checks the media section; dataDir fills media.dir when it
// is empty.
func (c *Config) validateMedia() error {
	m := &c.Media
	if err := nonNegative("media", m); err != nil {
		return err
	}
	if m.PublicURL != "" {
		u, err := url.Parse(m.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return errors.New("config: media.public_url: must be an http:// or https:// base URL without query")
		}
	}
	return nil
}

// mediaDir is media.dir, else the media directory in dataDir ("" when
// neither is known: no media store).
func (m *MediaConfig) mediaDir(dataDir string) string {
	if m.Dir != "" || dataDir == "" {
		return m.Dir
	}
	return filepath.Join(dataDir, "media")
}

// storeConfig is the media.Config the section describes, in dir.
func (m *MediaConfig) storeConfig(dir string) media.Config {
	return media.Config{
		Dir: dir, MaxBytes: m.MaxBytes, QuotaBytes: m.QuotaBytes, TenantQuotaBytes: m.TenantQuotaBytes,
		TTL: m.TTL, PublicURL: m.PublicURL, AllowPrivateURLs: m.AllowPrivateURLs,
	}
}
