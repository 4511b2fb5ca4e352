package telegram

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/platform"
	"connector/store"
)

// errTokenRejected ends Run: Telegram answered 401, so nothing works until
// the token in the config is fixed.
var errTokenRejected = errors.New("telegram: the bot token was rejected (401 Unauthorized)")

// Reconnect backoff while Telegram is unreachable.
const (
	connectBackoffMin = 500 * time.Millisecond
	connectBackoffMax = 30 * time.Second
	connectTimeout    = 15 * time.Second
	answerTimeout     = 10 * time.Second
	// confirmTimeout bounds the getUpdates that confirms the last answer
	// when a poll stops (confirmHandled).
	confirmTimeout = 5 * time.Second
)

// Run implements platform.Platform. It introduces the bot to Telegram
// (getMe, then setWebhook in webhook mode or deleteWebhook before polling),
// retrying with backoff while Telegram is unreachable, then long-polls or
// waits for webhook deliveries until ctx is done. It returns an error only
// when Telegram rejects the token.
func (p *Platform) Run(ctx context.Context, sink platform.Sink) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("telegram: Run is already running")
	}
	defer p.running.Store(false)
	p.sink.Store(&sink)
	defer p.sink.Store(nil)
	defer p.transport.CloseIdleConnections()
	defer p.awaitReplacing()

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { p.answerCallbacks(ctx) })
	wg.Go(func() { p.links.Run(ctx) })

	if err := p.connect(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	if p.cfg.WebhookURL != "" {
		<-ctx.Done()
		return nil
	}
	return p.deps.RunExclusive(ctx, "telegram/poll", p.poll)
}

// connect runs connectOnce until it succeeds, ctx ends, or the token is
// rejected.
func (p *Platform) connect(ctx context.Context) error {
	p.health.set(platform.Status{Detail: "connecting to the Telegram Bot API"})
	return platform.RetryStart(ctx, p.deps.Clock, connectTimeout, connectBackoffMin, connectBackoffMax, p.connectOnce, func(err error, retryIn time.Duration) error {
		if errors.Is(err, bot.ErrorUnauthorized) {
			p.health.set(platform.Status{Detail: "Telegram rejected the bot token (401)", Terminal: true})
			p.log.Error("telegram rejected the bot token; check telegram.bot_token")
			return errTokenRejected
		}
		text := p.errorText(err)
		detail := "cannot reach the Telegram Bot API: "
		if slices.ContainsFunc([]error{bot.ErrorBadRequest, bot.ErrorForbidden, bot.ErrorNotFound, bot.ErrorConflict},
			func(e error) bool { return errors.Is(err, e) }) { // an answer from Telegram, not none
			detail = "Telegram refused the bot's setup: "
		}
		p.health.set(platform.Status{Detail: detail + text})
		p.log.Warn("telegram bot api unreachable or refusing, retrying", "err", text, "retry_in", retryIn)
		return nil
	})
}

func (p *Platform) connectOnce(ctx context.Context) error {
	me, err := p.bot.GetMe(ctx)
	if err != nil {
		return err
	}
	m := *p.mapping.Load()
	m.botUsername = me.Username
	p.mapping.Store(&m)
	if p.cfg.WebhookURL != "" {
		if _, err := p.bot.SetWebhook(ctx, &bot.SetWebhookParams{
			URL:            p.cfg.WebhookURL,
			SecretToken:    p.cfg.WebhookSecret,
			AllowedUpdates: allowedUpdates,
			MaxConnections: p.cfg.WebhookMaxConnections,
		}); err != nil {
			return err
		}
		p.health.set(platform.Status{Ready: true, Detail: "webhook registered for @" + me.Username})
		p.log.Info("telegram webhook registered", "bot", me.Username)
		return nil
	}
	// A webhook left from an earlier deployment makes getUpdates fail with
	// 409; pending updates are kept.
	if _, err := p.bot.DeleteWebhook(ctx, &bot.DeleteWebhookParams{}); err != nil {
		return err
	}
	p.pollReady()
	return nil
}

// poll long-polls getUpdates until ctx ends or the token is rejected. The
// library runs one worker on an unbuffered channel with synchronous
// handlers, so updates reach polled strictly in order, and polled gives
// each its chat's turn in that order. poll returns once every update it
// handed out is ingested (or given up at shutdown). Each poll (a lease
// may end and come back) starts afresh: with a new library client, whose
// first offset confirms nothing, since the last poll may have given up
// updates it was handed, and with an open offset gate. A poll that stops
// confirms what its last answer handed out once it is handled
// (confirmHandled).
func (p *Platform) poll(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p.stopPoll.Store(&cancel)
	defer p.stopPoll.Store(nil)
	p.log.Info("telegram long polling started")
	p.offsets.reset()
	p.newBot().Start(ctx)
	// An answer cut short by the end of ctx: the part the worker took is
	// ingested as a whole answer would have been, so that the offset gate
	// is not left waiting for it.
	if answer := p.answer; len(answer) > 0 {
		p.answer = nil
		p.ingestAnswer(ctx, answer)
	}
	p.turns.Wait()
	if errors.Is(context.Cause(ctx), errTokenRejected) {
		return errTokenRejected
	}
	p.confirmHandled(ctx)
	return nil
}

// confirmHandled confirms to Telegram, as a poll stops, the updates of its
// last answer: only the next getUpdates' offset would, so the next poller
// (another instance after a handover, this one after a restart) would be
// handed them again. It sends one getUpdates with the offset past them,
// limit 1 and timeout 0, bounded by confirmTimeout: that confirms them
// and waits for nothing, and the update it may answer is not confirmed
// (the next poll fetches it). It confirms nothing unless every update the
// worker took was handled: one given up at shutdown is fetched again. Nor
// does it once the poll's lease was lost (store.Held): another instance
// may be polling, and Telegram would end that long poll with 409; the new
// poller's own offset confirms the updates.
func (p *Platform) confirmHandled(ctx context.Context) {
	last, ok := p.offsets.handled()
	if !ok || !store.Held(context.WithoutCancel(ctx)) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	var body bytes.Buffer
	form := multipart.NewWriter(&body)
	_ = form.WriteField("offset", strconv.FormatInt(last+1, 10)) // a bytes.Buffer cannot fail
	_ = form.WriteField("limit", "1")
	_ = form.WriteField("timeout", "0")
	_ = form.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.APIServerURL+"/bot"+p.cfg.BotToken+"/getUpdates", &body)
	if err == nil {
		req.Header.Set("Content-Type", form.FormDataContentType())
		var resp *http.Response
		if resp, err = p.transport.RoundTrip(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
	}
	if err != nil {
		p.log.Warn("telegram updates not confirmed as the poll stopped; the next poll fetches them again",
			"last_update_id", last, "err", p.errorText(err))
	}
}

// pollReady marks the platform ready for long polling: after the setup
// calls went through, and again whenever a long poll is answered after a
// failure.
func (p *Platform) pollReady() {
	p.health.set(platform.Status{Ready: true, Detail: "long polling as @" + p.mapping.Load().botUsername})
}

// libraryError receives the errors the library does not return to a caller
// (getUpdates failures, lost updates at shutdown).
func (p *Platform) libraryError(err error) {
	text := p.errorText(err)
	switch {
	case errors.Is(err, bot.ErrorUnauthorized):
		p.health.set(platform.Status{Detail: "Telegram rejected the bot token (401)", Terminal: true})
		p.log.Error("telegram rejected the bot token; check telegram.bot_token")
		if stop := p.stopPoll.Load(); stop != nil {
			(*stop)(errTokenRejected)
		}
		return
	case errors.Is(err, bot.ErrorConflict):
		p.health.set(platform.Status{Detail: "getUpdates conflicts with another poller or a webhook: " + text})
	case strings.Contains(text, "get updates"):
		p.health.set(platform.Status{Detail: "getUpdates failing: " + text})
	}
	p.log.Warn("telegram bot api error", "err", text)
}

// polled takes one update from the long poll: the updates of one
// getUpdates answer are collected, and when the answer's last one arrives
// they are ingested together (ingestAnswer), so the whole answer is stored
// in one commit. Only a handled update lets the next poll confirm it
// (offsetGate).
func (p *Platform) polled(ctx context.Context, _ *bot.Bot, u *models.Update) {
	received := p.deps.Clock.Now()
	last := p.offsets.handing(u.ID)
	if p.inAnswer(u.ID) {
		// Its first copy's done clears the id for the offset gate.
		p.drop(dropDuplicate, u.ID, 0)
	} else if in, ok := p.prepare(ctx, u); ok {
		p.answer = append(p.answer, polledUpdate{u: u, in: in, received: received})
	} else {
		p.offsets.done(u.ID)
	}
	if last {
		answer := p.answer
		p.answer = nil
		p.ingestAnswer(ctx, answer)
	}
}

// ingestOne gives one polled update its chat's turn and returns: updates
// of other chats go on while this one is ingested. A delivery failure is
// retried with backoff, holding the next poll (Telegram keeps the rest
// queued), so nothing is dropped while the connector runs.
func (p *Platform) ingestOne(ctx context.Context, pu *polledUpdate) {
	u, in := pu.u, pu.in
	p.turns.Go(ctx, in.chatID, func() { // unbounded: never refused
		backoff := 50 * time.Millisecond
		for {
			err := p.ingest(context.WithoutCancel(ctx), u, &in, pu.received)
			if err == nil {
				p.offsets.done(u.ID)
				return
			}
			if ctx.Err() != nil {
				p.log.Error("telegram update not delivered at shutdown", "update_id", u.ID, "err", err)
				return
			}
			p.log.Warn("telegram update not delivered, retrying", "update_id", u.ID, "err", err, "retry_in", backoff)
			_ = p.deps.Clock.Sleep(ctx, backoff) // a shutdown is seen above
			backoff = min(backoff*2, 5*time.Second)
			in, _ = normalize(u, p.mapping.Load()) // afresh: the failed attempt may have changed it
		}
	})
}

// answerCallbacks acknowledges delivered callback queries so the button's
// spinner stops, until ctx ends.
func (p *Platform) answerCallbacks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-p.callbacks:
			actx, cancel := context.WithTimeout(ctx, answerTimeout)
			if _, err := p.bot.AnswerCallbackQuery(actx, &bot.AnswerCallbackQueryParams{CallbackQueryID: id}); err != nil {
				p.log.Debug("telegram answerCallbackQuery failed", "err", p.errorText(err))
			}
			cancel()
		}
	}
}

// queueCallbackAnswer schedules an answerCallbackQuery; when the queue is
// full the answer is skipped (Telegram stops the spinner by itself).
func (p *Platform) queueCallbackAnswer(id string) {
	select {
	case p.callbacks <- id:
	default:
		p.log.Debug("telegram callback answer queue full; skipping")
	}
}
