package main

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connector/internal/wsconn"
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

	url      string
	client   *http.Client
	jobs     chan discordJob
	workers  sync.WaitGroup
	failed   atomic.Int64 // refused webhooks and messages the platform dropped
	progress chan struct{}
}

// Cleanup registers fn to run when the driver closes.
func (d *whatsappDriver) Cleanup(fn func()) { d.cleanups = append(d.cleanups, fn) }

// newPlatform starts the fake Graph API and builds the platform with a
// business number per tenant.
func (d *whatsappDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	token := randomToken()
	d.fake = whatsapptest.New(d, token)
	d.secret = randomToken()
	numbers := make(map[string]string, len(tenants))
	for i, t := range tenants {
		b := whatsapptest.Business{PhoneNumberID: strconv.Itoa(106_540_352_242_000 + i), DisplayNumber: strconv.Itoa(15_550_100_000 + i)}
		numbers[b.PhoneNumberID] = t.ID
		d.numbers = append(d.numbers, b)
	}
	allowAll := whatsapp.OptIn(true)
	return whatsapp.New(whatsapp.Config{
		AppSecret: d.secret, VerifyToken: randomToken(), AccessToken: token, APIURL: d.fake.URL,
		PhoneNumbers: numbers, AllowAllUsers: &allowAll,
	}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Metrics: whatsappDrops{d},
	})
}

// start starts the webhook workers; progress is signalled when a webhook
// fails.
func (d *whatsappDriver) start(baseURL string, progress chan struct{}) {
	d.url, d.progress = baseURL+whatsapp.WebhookPath, progress
	d.client = &http.Client{Timeout: dialTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: whatsappWorkers}}
	d.jobs = make(chan discordJob, whatsappWorkers)
	for range whatsappWorkers {
		d.workers.Go(func() {
			for j := range d.jobs {
				if !d.post(j) {
					d.fail()
				}
			}
		})
	}
}

// post sends message seq and reports whether Meta's webhook contract was
// met: 200.
func (d *whatsappDriver) post(j discordJob) bool {
	b := d.numbers[j.seq%len(d.numbers)]
	user := strconv.Itoa(447_700_900_000 + (j.seq/len(d.numbers))%sessionsPerGateway)
	text := string(append(appendStamp(nil, j.at), messageBody...))
	body := whatsapptest.Text(b, user, "Bench", "wamid.bench"+strconv.Itoa(j.seq), text)
	resp, err := d.client.Do(whatsapptest.SignedRequest(d.url, d.secret, body))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (d *whatsappDriver) fail() {
	d.failed.Add(1)
	wsconn.Signal(d.progress)
}

// fire queues message seq for the workers.
func (d *whatsappDriver) fire(seq int, at time.Time) error {
	d.jobs <- discordJob{seq: seq, at: at}
	return nil
}

// failures implements eventDriver.
func (d *whatsappDriver) failures() int64 { return d.failed.Load() }

// close stops the workers and the fake Graph API.
func (d *whatsappDriver) close() {
	if d.jobs != nil {
		close(d.jobs)
		d.workers.Wait()
	}
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}

// whatsappDrops counts messages the platform accepted but dropped, which
// will never reach a gateway.
type whatsappDrops struct{ d *whatsappDriver }

// RateLimitWait implements platform.Metrics.
func (whatsappDrops) RateLimitWait(string, time.Duration) {}

// RateLimited implements platform.Metrics.
func (whatsappDrops) RateLimited(string) {}

// Dropped implements platform.Metrics.
func (m whatsappDrops) Dropped(string, string) { m.d.fail() }
