package main

import (
	"log/slog"
	"net/http"
	"strconv"

	"connector/platform"
	"connector/platform/whatsapp"
	"connector/platform/whatsapp/whatsapptest"
	"connector/relay"
	"connector/vault"
)

// whatsappWorkers is how many webhook POSTs are in flight at once.
const whatsappWorkers = 16

// whatsappDriver drives events as Meta would: text messages POSTed to
// /whatsapp/webhook with their X-Hub-Signature-256, one business number
// per tenant, senders spread over the gateways' sessions. Latency runs from
// the scheduled POST to the gateway's read.
type whatsappDriver struct {
	fake     *whatsapptest.Server
	cleanups []func()
	secret   string
	numbers  []whatsapptest.Business // per tenant

	urls []string // the connectors' webhook URLs
	webhookPool
}

// Cleanup registers fn to run when the driver closes.
func (d *whatsappDriver) Cleanup(fn func()) { d.cleanups = append(d.cleanups, fn) }

// newPlatform starts the fake Graph API and builds the platform with a
// business number per tenant.
func (d *whatsappDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	ids := make([]string, len(tenants))
	for i, t := range tenants {
		ids[i] = t.ID
	}
	cfg := d.setup(ids)
	return whatsapp.New(cfg, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Metrics: dropCounter{&d.webhookPool},
	})
}

// setup starts the fake Graph API and returns the platform's configuration:
// a business number per tenant, every user allowed.
func (d *whatsappDriver) setup(tenants []string) whatsapp.Config {
	token := randomToken()
	d.fake = whatsapptest.New(d, token)
	d.secret = randomToken()
	numbers := make(map[string]string, len(tenants))
	for i, t := range tenants {
		b := whatsapptest.Business{PhoneNumberID: strconv.Itoa(106_540_352_242_000 + i), DisplayNumber: strconv.Itoa(15_550_100_000 + i)}
		numbers[b.PhoneNumberID] = t
		d.numbers = append(d.numbers, b)
	}
	allowAll := whatsapp.OptIn(true)
	return whatsapp.Config{
		AppSecret: d.secret, VerifyToken: randomToken(), AccessToken: token, APIURL: d.fake.URL,
		PhoneNumbers: numbers, AllowAllUsers: &allowAll,
	}
}

// start starts the webhook workers, which post message seq to the
// (seq mod n)th of the n connectors at baseURLs; progress is signalled
// when a webhook fails.
func (d *whatsappDriver) start(progress chan struct{}, baseURLs ...string) {
	d.urls = d.urls[:0]
	for _, u := range baseURLs {
		d.urls = append(d.urls, u+whatsapp.WebhookPath)
	}
	d.webhookPool.start(whatsappWorkers, progress, d.post)
}

// post sends message seq and reports whether Meta's webhook contract was
// met: 200.
func (d *whatsappDriver) post(j webhookJob) bool {
	b := d.numbers[j.seq%len(d.numbers)]
	user := strconv.Itoa(447_700_900_000 + (j.seq/len(d.numbers))%sessionsPerGateway)
	text := string(append(appendStamp(nil, j.at), messageBody...))
	body := whatsapptest.Text(b, user, "Bench", "wamid.bench"+strconv.Itoa(j.seq), text)
	resp, err := d.client.Do(whatsapptest.SignedRequest(d.urls[j.seq%len(d.urls)], d.secret, body))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// close stops the workers and the fake Graph API.
func (d *whatsappDriver) close() {
	d.stop()
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}
