package main

import (
	"connector/platform"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/media/mediatest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/relay/relaytest"
	"connector/session"
)

// Credentials of the WhatsApp black-box tests.
const (
	waAppSecret   = "wa-app-secret-0c4f9e2b"
	waVerifyToken = "wa-verify-token-61d3"
	waAccessToken = "EAAwa-access-token-8b2e7f"
	waSecret1     = "wa-gw1-secret"
	waSecret2     = "wa-gw2-secret"
)

var (
	waBiz1 = whatsapptest.Business{PhoneNumberID: "106540352242922", DisplayNumber: "15550109999"}
	waBiz2 = whatsapptest.Business{PhoneNumberID: "206540352242922", DisplayNumber: "15550108888"}
	// waBiz3 is a number of the app no tenant owns: its users reach the
	// tenant they linked to.
	waBiz3 = whatsapptest.Business{PhoneNumberID: "306540352242922", DisplayNumber: "15550107777"}
)

// waRig is the connector binary fronting WhatsApp for two tenants, each
// owning one business number, against a fake Graph API.
type waRig struct {
	bin, config, dir string
	env              []string
	fake             *whatsapptest.Server
	child            *child
}

func newWARig(t *testing.T) *waRig {
	r := &waRig{bin: connectorBinary(t), dir: t.TempDir(), fake: whatsapptest.New(t, waAccessToken),
		config: filepath.Join(t.TempDir(), "connector.yaml")}
	r.env = []string{"PATH=" + os.Getenv("PATH"), "WHATSAPP_APP_SECRET=" + waAppSecret,
		"WHATSAPP_VERIFY_TOKEN=" + waVerifyToken, "WHATSAPP_ACCESS_TOKEN=" + waAccessToken}
	r.listenOnFreePort(t)
	return r
}

// listenOnFreePort writes the rig's config with the public listener on a
// port free now. Re-host URLs name the public listener (media.public_url),
// so its port is chosen before the start and released for the child to
// bind: start moves to another when a process took it in between.
func (r *waRig) listenOnFreePort(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	doc := fmt.Sprintf(`listen: %s
ops: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
media: {dir: %s, public_url: "http://%s"}
tenants:
  - id: t1
    gateways: [{id: gw1, secrets: [%q]}]
  - id: t2
    gateways: [{id: gw2, secrets: [%q]}]
whatsapp:
  api_url: %s/
  api_version: v20.0
  phone_numbers: {"%s": t1, "%s": t2}
  allow_all_users: false
  tenants: {t1: {allow_all_users: true}, t2: {dm_policy: pairing}}
`, addr, filepath.Join(r.dir, "media"), addr, waSecret1, waSecret2, r.fake.URL, waBiz1.PhoneNumberID, waBiz2.PhoneNumberID)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waBindTries is how many ports start tries for the public listener.
const waBindTries = 5

// start runs the binary on the rig's data directory and waits until it is
// ready (a webhook before WhatsApp's Run runs is answered 503). When its
// public port was taken by another process since it was chosen (the
// connector exits saying so), it starts again on another.
func (r *waRig) start(t *testing.T) {
	t.Helper()
	for try := 1; ; try++ {
		c, err := launchChild(t, r.bin, r.env, r.config, r.dir, false)
		if err == nil {
			r.child = c
			c.waitReady(t)
			return
		}
		if try == waBindTries || !strings.Contains(c.stderr.String(), "is taken by another process") {
			t.Fatal(err)
		}
		t.Logf("the public port was taken since it was chosen; starting on another: %v", err)
		r.listenOnFreePort(t)
	}
}

func (r *waRig) webhook() string { return "http://" + r.child.addr + "/whatsapp/webhook" }

// post sends a signed (or forged) webhook and checks the answer.
func (r *waRig) post(t *testing.T, body []byte, secret string, want int) {
	t.Helper()
	post(t, whatsapptest.SignedRequest(r.webhook(), secret, body), want, "whatsapp webhook")
}

func (r *waRig) gateway(t *testing.T, id, secret string) *relaytest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token(id, secret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.CloseNow() })
	d, err := gw.Hello(ctx, "whatsapp_cloud", "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Platform != "whatsapp_cloud" || d.HasOp("edit") || !d.HasOp("prompt") || !d.HasOp("send_media") {
		t.Fatalf("descriptor %+v", d)
	}
	return gw
}

// waInbound waits for the gateway's next inbound and acknowledges it.
func waInbound(t *testing.T, gw *relaytest.Client) relaytest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	return nextInbound(t, ctx, gw)
}

func outbound(t *testing.T, gw *relaytest.Client, action map[string]any) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if _, ok := action["metadata"]; !ok {
		action["metadata"] = map[string]any{}
	}
	res, err := gw.Outbound(ctx, "whatsapp_cloud", action)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestWhatsAppBlackBox drives the connector binary as Meta and two
// tenants' gateways would: the handshake, signed and forged webhooks, a
// redelivery, isolation of two numbers, send, the 24-hour window, prompts
// with buttons and a list, send_media and inbound media byte-exact.
func TestWhatsAppBlackBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newWARig(t)
	r.start(t)
	base := "http://" + r.child.addr

	t.Run("handshake", func(t *testing.T) {
		ok := post(t, mustGet(t, r.webhook()+"?hub.mode=subscribe&hub.verify_token="+waVerifyToken+"&hub.challenge=8412"), http.StatusOK, "handshake")
		if ok != "8412" {
			t.Fatalf("challenge answered %q", ok)
		}
		post(t, mustGet(t, r.webhook()+"?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=8412"), http.StatusForbidden, "wrong token")
	})

	gw1, gw2 := r.gateway(t, "gw1", waSecret1), r.gateway(t, "gw2", waSecret2)
	const ada, bob = "447700900123", "14155550142"

	t.Run("signed event reaches the number's tenant once; forged refused", func(t *testing.T) {
		forged := whatsapptest.Text(waBiz1, ada, "Ada", "wamid.F1", "forged")
		r.post(t, forged, "another-secret", http.StatusUnauthorized)
		first := whatsapptest.Text(waBiz1, ada, "Ada Lovelace", "wamid.A1", "hello t1")
		r.post(t, first, waAppSecret, http.StatusOK)
		r.post(t, first, waAppSecret, http.StatusOK) // Meta's redelivery
		r.post(t, whatsapptest.Text(waBiz2, bob, "Bob", "wamid.B1", "hello t2"), waAppSecret, http.StatusOK)
		r.post(t, whatsapptest.Text(waBiz1, ada, "Ada Lovelace", "wamid.A2", "second"), waAppSecret, http.StatusOK)
		f := waInbound(t, gw1)
		src := f.Event.Source
		if f.Event.Text != "hello t1" || src.Platform != "whatsapp_cloud" || src.ChatID != ada || src.ChatType != "dm" ||
			src.UserName.Value != "Ada Lovelace" || session.Key(&src, session.DefaultOptions) != "agent:main:whatsapp_cloud:dm:"+ada {
			t.Fatalf("inbound %+v", f.Event)
		}
		if f := waInbound(t, gw1); f.Event.Text != "second" {
			t.Fatalf("after the redelivery gw1 got %q (the redelivery or the forgery was delivered)", f.Event.Text)
		}
		if f := waInbound(t, gw2); f.Event.Text != "hello t2" || f.Event.Source.ChatID != bob {
			t.Fatalf("gw2 got %+v", f.Event)
		}
	})

	t.Run("send and isolation", func(t *testing.T) {
		res := outbound(t, gw1, map[string]any{"op": "send", "chat_id": ada, "content": "hi **Ada**", "reply_to": "wamid.A2"})
		if !res.Success {
			t.Fatal(res)
		}
		sent := r.fake.Sent()
		last := sent[len(sent)-1]
		if last.PhoneNumberID != waBiz1.PhoneNumberID || last.To != ada || last.Block()["body"] != "hi *Ada*" || last.Context() != "wamid.A2" || last.ID != res.MessageID {
			t.Fatalf("sent %+v", last)
		}
		for _, c := range []struct {
			gw   *relaytest.Client
			user string
		}{{gw1, bob}, {gw2, ada}} {
			if res := outbound(t, c.gw, map[string]any{"op": "send", "chat_id": c.user, "content": "x", "reply_to": nil}); res.Code != contract.CodeEgressDeclined {
				t.Errorf("send to the other tenant's user: %+v", res)
			}
		}
		if res := outbound(t, gw1, map[string]any{"op": "edit", "chat_id": ada, "message_id": res.MessageID, "content": "y"}); res.Success {
			t.Errorf("edit: %+v", res)
		}
	})

	t.Run("prompt round trips", func(t *testing.T) {
		for _, c := range []struct {
			n    int
			kind string
			list bool
		}{{3, "button", false}, {6, "list", true}} {
			opts := make([]any, c.n)
			for i := range opts {
				opts[i] = map[string]any{"id": fmt.Sprintf("c%d", i), "label": fmt.Sprintf("Choice %d", i)}
			}
			prompt := "ab12cd.0000" + c.kind
			res := outbound(t, gw1, map[string]any{"op": "prompt", "chat_id": ada, "content": "Which?", "prompt_kind": "choice",
				"prompt_id": prompt, "options": opts, "reply_to": nil})
			if !res.Success {
				t.Fatal(res)
			}
			sent := r.fake.Sent()
			if m := sent[len(sent)-1]; m.Type != "interactive" || m.Block()["type"] != c.kind {
				t.Fatalf("%s prompt sent as %+v", c.kind, m.Body)
			}
			r.post(t, whatsapptest.Tap(waBiz1, ada, "Ada", "wamid.tap"+c.kind, res.MessageID, "hp1:"+prompt+":c1", "Choice 1", c.list), waAppSecret, http.StatusOK)
			f := waInbound(t, gw1)
			pr := f.Event.PromptResponse
			if pr == nil || pr.PromptID != prompt || pr.OptionID != "c1" || f.Event.Text != "/c1" || pr.PromptMessageID != res.MessageID {
				t.Fatalf("tap on the %s prompt arrived as %+v", c.kind, f.Event)
			}
		}
	})

	t.Run("send_media byte-exact", func(t *testing.T) {
		const size = 1 << 20
		tok := relaytest.Token("gw1", waSecret1, time.Now())
		status, id := mediatest.Upload(t, base, tok, mediatest.Content(7, size), size, "video/mp4", "clip.mp4")
		if status != http.StatusOK {
			t.Fatalf("upload %d", status)
		}
		res := outbound(t, gw1, map[string]any{"op": "send_media", "chat_id": ada, "media_kind": "video",
			"source_url": base + "/relay/media/" + id, "content": "a clip", "reply_to": nil})
		if !res.Success {
			t.Fatal(res)
		}
		sent := r.fake.Sent()
		m := sent[len(sent)-1]
		up, ok := r.fake.Media(m.Block()["id"].(string))
		want, _ := mediatest.SHA256(mediatest.Content(7, size))
		got, n := mediatest.SHA256(strings.NewReader(string(up.Data)))
		if m.Type != "video" || !ok || got != want || n != size || up.MIME != "video/mp4" || m.Block()["caption"] != "a clip" {
			t.Fatalf("media message %+v: upload %v %d bytes", m.Body, ok, n)
		}
	})

	t.Run("inbound media byte-exact", func(t *testing.T) {
		const size = 3 << 20
		data, _ := io.ReadAll(mediatest.Content(11, size))
		r.fake.AddMedia("877364120019283", "application/pdf", data)
		r.post(t, whatsapptest.Message(waBiz1, ada, "Ada", map[string]any{"id": "wamid.DOC", "type": "document",
			"document": map[string]any{"id": "877364120019283", "mime_type": "application/pdf", "filename": "contrato.pdf"}}), waAppSecret, http.StatusOK)
		f := waInbound(t, gw1)
		if f.Event.Text != "[Document: contrato.pdf]" || f.Event.MessageType != "document" || len(f.Event.MediaURLs) != 1 {
			t.Fatalf("inbound %+v", f.Event)
		}
		want, _ := mediatest.SHA256(strings.NewReader(string(data)))
		status, got, n := mediatest.Download(t, f.Event.MediaURLs[0], relaytest.Token("gw1", waSecret1, time.Now()))
		if status != 200 || got != want || n != size {
			t.Fatalf("re-host download: %d, %d bytes", status, n)
		}
		if status, _, _ := mediatest.Download(t, f.Event.MediaURLs[0], relaytest.Token("gw2", waSecret2, time.Now())); status == 200 {
			t.Fatal("t2's gateway fetched t1's media")
		}
	})

	t.Run("statuses counted per tenant, never delivered", func(t *testing.T) {
		r.post(t, whatsapptest.Status(waBiz1, ada, "wamid.fake000001", "read", 0), waAppSecret, http.StatusOK)
		r.post(t, whatsapptest.Status(waBiz2, bob, "wamid.fake000002", "failed", 131026), waAppSecret, http.StatusOK)
		r.post(t, whatsapptest.Text(waBiz1, ada, "Ada", "wamid.after", "after the statuses"), waAppSecret, http.StatusOK)
		if f := waInbound(t, gw1); f.Event.Text != "after the statuses" {
			t.Fatalf("gw1 got %+v", f.Event)
		}
		for labels, want := range map[string]float64{`status="read",tenant="t1"`: 1, `status="failed",tenant="t2"`: 1, `status="failed",tenant="t1"`: 0} {
			if got := r.child.metric(t, "connector_delivery_statuses_total", labels); got != want {
				t.Errorf("statuses{%s} = %v, want %v", labels, got, want)
			}
		}
	})

	t.Run("24-hour window", func(t *testing.T) {
		r.fake.CloseWindow(ada)
		res := outbound(t, gw1, map[string]any{"op": "send", "chat_id": ada, "content": "tomorrow", "reply_to": nil})
		if res.Success || res.Code != "window_closed" {
			t.Fatalf("%+v", res)
		}
	})

	t.Run("a /manage/link code links a user of an unowned number", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, base+"/manage/link", strings.NewReader(`{"platform":"whatsapp_cloud"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw1", waSecret1, time.Now()))
		var link struct{ Code string }
		if err := json.Unmarshal([]byte(post(t, req, http.StatusOK, "/manage/link on whatsapp_cloud")), &link); err != nil || link.Code == "" {
			t.Fatalf("link answer: %q, %v", link.Code, err)
		}
		const carol = "447700900777"
		before := len(r.fake.Sent())
		r.post(t, whatsapptest.Text(waBiz3, carol, "Carol", "wamid.L1", "/link "+link.Code), waAppSecret, http.StatusOK)
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		sent, err := r.fake.WaitSent(ctx, before+1) // the link desk answers once the link is applied
		if err != nil {
			t.Fatal(err)
		}
		if reply := sent[before]; reply.To != carol || reply.PhoneNumberID != waBiz3.PhoneNumberID || !strings.Contains(fmt.Sprint(reply.Body), platform.LinkedReply) {
			t.Fatalf("reply to the /link DM: %+v", reply)
		}
		r.post(t, whatsapptest.Text(waBiz3, carol, "Carol", "wamid.L2", "linked now"), waAppSecret, http.StatusOK)
		if f := waInbound(t, gw1); f.Event.Text != "linked now" || f.Event.Source.ChatID != carol {
			t.Fatalf("gw1 got %+v, want carol's message after her /link", f.Event)
		}
	})

	if logs := r.child.stderr.String(); strings.Contains(logs, waAccessToken) || strings.Contains(logs, waAppSecret) || strings.Contains(logs, waVerifyToken) {
		t.Fatal("a WhatsApp credential is in the log")
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestWhatsAppKill9DuringBurst posts a burst of signed webhooks from
// several senders and SIGKILLs the connector part way through: after a
// restart on the same data directory, every message Meta got a 200 for
// reaches the gateway, and Meta's retries of the others (answered 200
// now) complete the set.
func TestWhatsAppKill9DuringBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newWARig(t)
	r.start(t)
	const n, senders, workers = 240, 6, 4
	body := func(i int) []byte {
		return whatsapptest.Text(waBiz1, fmt.Sprintf("4477009%05d", i%senders), "U", fmt.Sprintf("wamid.burst%04d", i), fmt.Sprintf("evt %d", i))
	}
	var (
		mu        sync.Mutex
		confirmed = map[int]bool{}
		half      = make(chan struct{})
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	url := r.webhook()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				resp, err := http.DefaultClient.Do(whatsapptest.SignedRequest(url, waAppSecret, body(i)))
				if err != nil {
					continue // the connector is gone: Meta would retry
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					confirmed[i] = true
					if len(confirmed) == n/3 {
						close(half)
					}
					mu.Unlock()
				}
			}
		}()
	}
	select {
	case <-half:
	case <-time.After(crashWait):
		t.Fatalf("no %d confirmations within %v", n/3, crashWait)
	}
	if err := r.child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.child.exited
	wg.Wait()
	mu.Lock()
	before := len(confirmed)
	mu.Unlock()
	t.Logf("%d of %d messages confirmed before SIGKILL", before, n)

	r.start(t)
	gw := r.gateway(t, "gw1", waSecret1)
	seen := map[int]bool{}
	want := func() bool {
		for i := range confirmed {
			if !seen[i] {
				return false
			}
		}
		return true
	}
	read := func() {
		f := waInbound(t, gw)
		var i int
		if _, err := fmt.Sscanf(f.Event.Text, "evt %d", &i); err != nil {
			t.Fatalf("inbound %q", f.Event.Text)
		}
		seen[i] = true
	}
	for !want() {
		read()
	}
	// Meta retries what it got no 200 for.
	for i := range n {
		if !confirmed[i] {
			post(t, whatsapptest.SignedRequest(r.webhook(), waAppSecret, body(i)), http.StatusOK, "retry")
			confirmed[i] = true
		}
	}
	for !want() {
		read()
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages delivered, want %d", len(seen), n)
	}
}
