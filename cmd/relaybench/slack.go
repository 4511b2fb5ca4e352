package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connector/internal/wsconn"
	"connector/platform"
	"connector/platform/slack"
	"connector/platform/slack/slacktest"
	"connector/relay"
	"connector/vault"
)

// slackWorkers is how many Events API deliveries are in flight at once.
const slackWorkers = 16

// slackDriver drives events as Slack would: signed Events API callbacks
// (message events mentioning the bot, in a thread per user) POSTed to
// /slack/events, from a workspace per tenant installed through the OAuth
// flow (/slack/install, /slack/oauth/callback), with a fake Slack
// (slacktest) for the Web API the platform calls. Latency runs from the
// scheduled POST to the gateway's read.
type slackDriver struct {
	fake     *slacktest.Server
	cleanups []func()
	secret   string
	teams    []slacktest.Team // per tenant

	url      string
	client   *http.Client
	jobs     chan slackJob
	workers  sync.WaitGroup
	failed   atomic.Int64 // refused deliveries and events the platform dropped
	progress chan struct{}
}

type slackJob struct {
	seq int
	at  time.Time
}

// Helper lets the driver stand in for the testing.TB slacktest.New asks for.
func (d *slackDriver) Helper() {}

// Cleanup registers fn to run when the driver closes.
func (d *slackDriver) Cleanup(fn func()) { d.cleanups = append(d.cleanups, fn) }

// slackUser is the id of the benchmark's user i.
func slackUser(i int) string { return fmt.Sprintf("U0BU%06d", i) }

// slackChannel is the channel every workspace's events come from.
const slackChannel = "C0BENCH001"

// newPlatform starts the fake Slack and builds the platform with a
// workspace bound to each tenant.
func (d *slackDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	d.fake = slacktest.New(d)
	d.secret = randomToken()
	teams := make(map[string]string, len(tenants))
	bindings := make([]platform.Binding, 0, len(tenants))
	for i, t := range tenants {
		team := slacktest.Team{ID: fmt.Sprintf("T0BW%06d", i), Name: "Bench " + strconv.Itoa(i),
			Token: "xoxb-bench-" + strconv.Itoa(i), BotUser: fmt.Sprintf("U0BB%06d", i), BotID: fmt.Sprintf("B0BB%06d", i)}
		d.teams = append(d.teams, team)
		for u := range sessionsPerGateway {
			d.fake.AddUser(team.ID, slacktest.User{ID: slackUser(u), Name: "user" + strconv.Itoa(u), RealName: "Bench " + strconv.Itoa(u)})
		}
		d.fake.AddChannel(team.ID, slacktest.Channel{ID: slackChannel, Name: "general"})
		teams[team.ID] = t.ID
		bindings = append(bindings, platform.Binding{Kind: platform.BindTeam, ID: team.ID, Tenant: t.ID})
	}
	p, err := slack.New(slack.Config{
		SigningSecret: d.secret, ClientID: "1.2", ClientSecret: randomToken(), APIURL: d.fake.URL, Teams: teams,
	}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Metrics: slackDrops{d},
	})
	if err != nil {
		return nil, err
	}
	if err := p.Bind(bindings); err != nil {
		return nil, err
	}
	return p, nil
}

// start installs the workspaces (as their admins would, through the OAuth
// flow) and starts the delivery workers; progress is signalled when a
// delivery fails.
func (d *slackDriver) start(baseURL string, p platform.Platform, progress chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	for !p.Status().Ready {
		if ctx.Err() != nil {
			return fmt.Errorf("slack platform not ready: %s", p.Status().Detail)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.url, d.progress = baseURL+slack.EventsPath, progress
	d.client = &http.Client{Timeout: dialTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: slackWorkers},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, team := range d.teams {
		if err := d.install(baseURL, "bench-code-"+strconv.Itoa(i), team); err != nil {
			return fmt.Errorf("installing workspace %s: %w", team.ID, err)
		}
	}
	d.jobs = make(chan slackJob, slackWorkers)
	for range slackWorkers {
		d.workers.Go(func() {
			for j := range d.jobs {
				if !d.post(j) {
					d.fail()
				}
			}
		})
	}
	return nil
}

// install runs the OAuth install of team: /slack/install redirects to
// Slack with a state and sets its cookie; Slack redirects back to
// /slack/oauth/callback with a code the platform exchanges.
func (d *slackDriver) install(baseURL, code string, team slacktest.Team) error {
	resp, err := d.client.Get(baseURL + slack.InstallPath)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound || len(resp.Cookies()) == 0 {
		return fmt.Errorf("install answered %d", resp.StatusCode)
	}
	d.fake.AddOAuthCode(code, team)
	req, _ := http.NewRequest(http.MethodGet, baseURL+slack.OAuthCallbackPath+"?"+
		url.Values{"code": {code}, "state": {loc.Query().Get("state")}}.Encode(), nil)
	for _, c := range resp.Cookies() {
		req.AddCookie(c)
	}
	if resp, err = d.client.Do(req); err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("callback answered %d", resp.StatusCode)
	}
	return nil
}

// post delivers event seq and reports whether the Events API contract was
// met: 200 once it is stored.
func (d *slackDriver) post(j slackJob) bool {
	team := d.teams[j.seq%len(d.teams)]
	u := (j.seq / len(d.teams)) % sessionsPerGateway
	// A thread per user in each workspace: one session each.
	thread := fmt.Sprintf("1768400000.%06d", u)
	ts := fmt.Sprintf("%d.%06d", 1768500000+j.seq/1_000_000, j.seq%1_000_000)
	text := "<@" + team.BotUser + "> " + string(append(appendStamp(nil, j.at), messageBody...))
	body := slacktest.Envelope(team.ID, team.BotUser, "EvB"+strconv.Itoa(j.seq),
		slacktest.MessageEvent(team.ID, slackChannel, slackUser(u), ts, thread, text))
	resp, err := d.client.Do(slacktest.SignedRequest(d.url, d.secret, time.Now(), "application/json", body))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (d *slackDriver) fail() {
	d.failed.Add(1)
	wsconn.Signal(d.progress)
}

// fire queues event seq for the workers.
func (d *slackDriver) fire(seq int, at time.Time) error {
	d.jobs <- slackJob{seq: seq, at: at}
	return nil
}

// failures implements eventDriver.
func (d *slackDriver) failures() int64 { return d.failed.Load() }

// close stops the workers and the fake Slack.
func (d *slackDriver) close() {
	if d.jobs != nil {
		close(d.jobs)
		d.workers.Wait()
	}
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}

// slackDrops counts events the platform accepted but dropped, which will
// never reach a gateway.
type slackDrops struct{ d *slackDriver }

// RateLimitWait implements platform.Metrics.
func (slackDrops) RateLimitWait(string, time.Duration) {}

// RateLimited implements platform.Metrics.
func (slackDrops) RateLimited(string) {}

// Dropped implements platform.Metrics.
func (m slackDrops) Dropped(string, string) { m.d.fail() }
