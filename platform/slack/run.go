package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"connector/platform"
)

// errTokenRejected ends Run: Slack refused bot_token or app_token, so
// nothing works until the config is fixed.
var errTokenRejected = errors.New("slack: the token was rejected (invalid_auth)")

// Backoff while Slack is unreachable, and bounds of the startup calls.
const (
	connectBackoffMin = 500 * time.Millisecond
	connectBackoffMax = 30 * time.Second
	connectTimeout    = 15 * time.Second
	ackTimeout        = 10 * time.Second
)

// Run implements platform.Platform. It takes the durable intake's entries
// left by a stopped instance (intake.go), then deliveries (the HTTP routes
// serve from then on, a request of those entries' chats behind them),
// asks auth.test which workspace and bot user bot_token is (retrying with
// backoff while Slack is unreachable), and, with app_token, holds the Socket Mode connection while this instance
// holds the lease slack/socket (of several instances, one at a time). It
// returns when ctx is done, or with an error when Slack rejects app_token,
// or bot_token without client_id (with it, the OAuth installs are served
// on).
func (p *Platform) Run(ctx context.Context, sink platform.Sink) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("slack: Run is already running")
	}
	defer p.running.Store(false)
	defer p.sink.Store(nil)
	// The queues first: closed, they take nothing more from the jobs
	// still running (the intake's sweep, a socket event's), which Run
	// then waits for.
	p.queues.Open()
	defer p.bg.Wait()
	defer p.queues.Close()
	// Run's own end (a token refused) ends what it started too, before
	// it waits for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.startIntake(ctx, func() { p.sink.Store(&sink) }) // the entries left run first
	p.bg.Go(func() { p.links.Run(ctx) })
	if err := p.identify(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	if p.cfg.AppToken == "" {
		<-ctx.Done()
		return nil
	}
	return p.deps.RunExclusive(ctx, "slack/socket", p.runSocket)
}

// errBotTokenSkipped ends identify without ending Run: Slack refused
// bot_token, but the workspaces installed through OAuth are served.
var errBotTokenSkipped = errors.New("slack: bot_token refused; serving the OAuth installs")

// identify runs auth.test for bot_token until it answers, or until Slack
// refuses the token: that ends Run, unless workspaces are installed
// through OAuth (client_id), which are served on.
func (p *Platform) identify(ctx context.Context) error {
	if p.cfg.BotToken == "" {
		p.setStatus(platform.Status{Ready: true, Detail: "serving the workspaces installed through OAuth"})
		return nil
	}
	p.setStatus(platform.Status{Detail: "asking Slack who bot_token is (auth.test)"})
	err := platform.RetryStart(ctx, p.clock, connectTimeout, connectBackoffMin, connectBackoffMax, func(ctx context.Context) error {
		var who *slack.AuthTestResponse
		err := p.call(ctx, "", "auth.test", func(ctx context.Context, c *slack.Client) (err error) {
			who, err = c.AuthTestContext(ctx)
			return err
		})
		if err == nil {
			p.works.identify(who.TeamID, who.UserID)
			p.setStatus(platform.Status{Ready: true, Detail: "connected as @" + who.User + " in " + who.Team})
			p.log.Info("slack bot token identified", "team", who.TeamID, "bot_user", who.UserID)
		}
		return err
	}, func(err error, retryIn time.Duration) error {
		if tokenRevoked(err) && p.cfg.ClientID != "" {
			// Its workspace only: the OAuth installs still serve theirs.
			p.setStatus(platform.Status{Ready: true, Detail: "Slack rejected bot_token (" + slackErr(err) + "); serving the workspaces installed through OAuth"})
			p.log.Error("slack rejected the bot token; its workspace is not served, the OAuth installs are; check slack.bot_token")
			return errBotTokenSkipped
		}
		if tokenRevoked(err) {
			p.setStatus(platform.Status{Detail: "Slack rejected bot_token (" + slackErr(err) + ")", Terminal: true})
			p.log.Error("slack rejected the bot token; check slack.bot_token")
			return errTokenRejected
		}
		p.setStatus(platform.Status{Detail: "cannot reach Slack: " + p.errorText(err)})
		p.log.Warn("slack unreachable, retrying auth.test", "err", p.errorText(err), "retry_in", retryIn)
		return nil
	})
	if errors.Is(err, errBotTokenSkipped) {
		return nil
	}
	return err
}

// runSocket holds a Socket Mode connection until ctx ends (the lease is
// lost or the connector stops), reconnecting with backoff. Each envelope
// is acknowledged only once its event is stored or deliberately dropped;
// one left unacknowledged is sent again by Slack.
func (p *Platform) runSocket(ctx context.Context) error {
	p.log.Info("slack socket mode lease held; connecting")
	api := slack.New("", slack.OptionAppLevelToken(p.cfg.AppToken), slack.OptionAPIURL(p.cfg.APIURL), slack.OptionHTTPClient(p.http))
	backoff := connectBackoffMin
	for ctx.Err() == nil {
		start := p.clock.Now()
		err := p.socketSession(ctx, api)
		if ctx.Err() != nil {
			break
		}
		if tokenRevoked(err) {
			p.setStatus(platform.Status{Detail: "Slack rejected app_token", Terminal: true})
			p.log.Error("slack rejected the app token; check slack.app_token")
			return errTokenRejected
		}
		if p.clock.Now().Sub(start) > time.Minute {
			backoff = connectBackoffMin
		}
		p.setStatus(platform.Status{Detail: "socket mode reconnecting: " + p.errorText(err)})
		p.log.Warn("slack socket mode connection ended; reconnecting", "err", p.errorText(err), "retry_in", backoff)
		if p.clock.Sleep(ctx, backoff) != nil {
			break
		}
		backoff = min(backoff*2, connectBackoffMax)
	}
	p.log.Info("slack socket mode stopped")
	return nil
}

// socketSession runs one socketmode client until it fails or ctx ends.
func (p *Platform) socketSession(ctx context.Context, api *slack.Client) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := socketmode.New(api, socketmode.OptionLog(slogLogger{p}))
	ended := make(chan error, 1)
	go func() { ended <- client.RunContext(ctx) }()
	for {
		select {
		case err := <-ended:
			return err
		case ev := <-client.Events:
			p.socketEvent(ctx, client, &ev)
		}
	}
}

// slogLogger routes the socketmode client's log lines to the debug log.
type slogLogger struct{ p *Platform }

func (l slogLogger) Output(_ int, s string) error {
	l.p.log.Debug("slack socketmode: " + l.p.errorText(errors.New(s)))
	return nil
}

// socketEvent handles one event of the socketmode client. Messages are
// queued in their chat's order before the next envelope is read, or, as on
// the HTTP route, stored in the durable intake and acknowledged at once (a
// message with files or in a thread, and every event, press and slash
// command of a chat while an entry of that chat is pending here); the rest
// run beside.
func (p *Platform) socketEvent(ctx context.Context, client *socketmode.Client, ev *socketmode.Event) {
	received := p.clock.Now()
	switch ev.Type {
	case socketmode.EventTypeConnected:
		p.setStatus(platform.Status{Ready: true, Detail: "socket mode connected"})
		return
	case socketmode.EventTypeEventsAPI, socketmode.EventTypeInteractive, socketmode.EventTypeSlashCommand:
	case socketmode.EventTypeErrorBadMessage:
		// An events_api payload the client could not read into
		// slackevents' typed events, which are stricter than wireEvent (a
		// team object), goes on as the HTTP route reads it. Any other
		// envelope it could not read is counted as the HTTP routes count a
		// body they answer 400 (malformed; unsupported, one of a type it
		// does not know), and acknowledged: received, as Slack asks of
		// every envelope (sent again, it reads no better, and one left
		// unanswered counts against the app's subscription).
		bad, _ := ev.Data.(*socketmode.ErrorBadMessage)
		var req socketmode.Request
		if bad == nil || json.Unmarshal(bad.Message, &req) != nil || req.EnvelopeID == "" {
			p.drop(dropMalformed, "")
			return
		}
		if req.Type == socketmode.RequestTypeEventsAPI {
			ev = &socketmode.Event{Type: socketmode.EventTypeEventsAPI, Request: &req}
			break
		}
		if req.Type == socketmode.RequestTypeInteractive || req.Type == socketmode.RequestTypeSlashCommands {
			p.drop(dropMalformed, "")
		} else {
			p.drop(dropUnsupported, "")
		}
		p.ackEnvelope(ctx, client, req.EnvelopeID, nil)
		return
	default:
		return
	}
	req := ev.Request
	if req == nil {
		return
	}
	ack := func(err error, payload any) {
		if err != nil {
			if !errors.Is(err, platform.ErrBusy) {
				p.log.Warn("slack socket mode envelope not stored; Slack will send it again", "err", p.errorText(err))
			}
			return
		}
		p.ackEnvelope(ctx, client, req.EnvelopeID, payload)
	}
	switch ev.Type {
	case socketmode.EventTypeEventsAPI:
		var env envelope
		if err := decodeEnvelope(req.Payload, &env); err != nil || env.Type != "event_callback" {
			if err != nil { // as the HTTP route counts it
				p.drop(dropMalformed, "")
			} else {
				p.notCallback(&env)
			}
			ack(nil, nil)
			return
		}
		chat, tenant, slow, job := p.envelopeJob(&env, received, true)
		run := func() { ack(job(ctx), nil) }
		if chat == "" {
			p.beside(run)
			return
		}
		if p.intakes(chat, slow) {
			// Acknowledged once stored in the intake, before its files or
			// thread are fetched; still before the next envelope is read,
			// so the chat's order holds.
			actx, cancel := context.WithTimeout(ctx, ackTimeout)
			defer cancel()
			r := &intakeRequest{rec: intakeRecord{Route: routeEvents, Body: req.Payload, Received: received.UnixNano()}, once: slow}
			ack(p.admit(actx, chat, tenant, r), nil)
			return
		}
		if !p.queues.Go(ctx, chat, run) {
			ack(cmp.Or(ctx.Err(), errNotRunning), nil) // not taken: Slack sends it again
		}
	case socketmode.EventTypeInteractive:
		ic, _ := ev.Data.(slack.InteractionCallback) // as the client read it
		p.beside(func() {
			body := url.Values{"payload": {string(req.Payload)}}.Encode() // as the HTTP route's
			pr, err := p.interaction(withIntake(ctx, routeInteractions, []byte(body), received, ""), &ic, received)
			if busyPress(err) {
				ack(nil, nil)
				p.tellBusy(ic.ResponseURL, &pr)
				return
			}
			ack(err, nil)
		})
	case socketmode.EventTypeSlashCommand:
		p.beside(func() {
			var form map[string]any // an object: the client read it as one (else EventTypeErrorBadMessage)
			_ = json.Unmarshal(req.Payload, &form)
			fields := url.Values{} // as the HTTP route's body
			for k, v := range form {
				if s, ok := v.(string); ok {
					fields.Set(k, s)
				}
			}
			c := slashFromFields(fields.Get)
			text, err := p.command(ctx, []byte(fields.Encode()), &c, received)
			var payload any
			if text != "" {
				payload = map[string]string{"response_type": "ephemeral", "text": text}
			}
			ack(err, payload)
		})
	}
}

// ackEnvelope acknowledges envelope id with payload (nil: none).
func (p *Platform) ackEnvelope(ctx context.Context, client *socketmode.Client, id string, payload any) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if payload == nil {
		payload = struct{}{}
	}
	if err := client.AckCtx(ctx, id, payload); err != nil {
		p.log.Debug("slack socket mode ack failed", "err", p.errorText(err))
	}
}

// maxBeside bounds the Socket Mode envelopes handled beside the reader
// (interactions, slash commands, events of no chat) at once.
var maxBeside = 1024

// beside runs fn on a goroutine of its own, unless maxBeside of them are
// running: then fn does not run, its envelope is left unacknowledged (an
// event is sent again by Slack; a press or slash command is not, and its
// user sees Slack's timeout error), and it is counted as dropped
// (overloaded) and logged.
func (p *Platform) beside(fn func()) {
	select {
	case p.besides <- struct{}{}:
	default:
		p.metrics.Dropped(platformName, dropOverloaded)
		p.log.Warn("slack socket mode: too many envelopes in hand; one left unacknowledged", "limit", cap(p.besides))
		return
	}
	p.bg.Go(func() {
		defer func() { <-p.besides }()
		fn()
	})
}
