package whatsapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/session"
)

// FuzzWebhookPayload feeds arbitrary bodies (what a signed webhook could
// carry) through decoding and the classification of every message: no
// panic, and an event's source is always the sender's DM.
func FuzzWebhookPayload(f *testing.F) {
	b := whatsapptest.Business{PhoneNumberID: "1", DisplayNumber: "2"}
	f.Add(whatsapptest.Text(b, "447700900123", "Ada", "wamid.1", "hi"))
	f.Add(whatsapptest.Tap(b, "447700900123", "", "wamid.2", "wamid.1", "hp1:p:o", "O", true))
	f.Add(whatsapptest.Tap(b, "447700900123", "", "wamid.3", "wamid.1", "appr:x:approve", "A", false))
	f.Add(whatsapptest.Status(b, "447700900123", "wamid.1", "failed", 131026))
	f.Add([]byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":[{"from":"1","chat":{"id":"x"},"type":"document","document":{"id":"9","filename":"f"}}]}}]}]}`))
	f.Add([]byte(`{"object":1}`))
	acc, _ := newAccess(TenantConfig{DMPolicy: "pairing"}, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		var p payload
		if decodePayload(body, &p) != nil {
			return
		}
		for _, e := range p.Entry {
			for _, c := range e.Changes {
				names := c.Value.contactNames()
				for i := range c.Value.Messages {
					m := &c.Value.Messages[i]
					ev, drop := classify(m, names, c.Value.Metadata.DisplayPhoneNumber, acc, tenantTapsNone{})
					if drop == "" && (ev.Source.ChatType != "dm" || ev.Source.ChatID != strings.TrimSpace(m.From) || ev.Source.ChatID == "") {
						t.Fatalf("event source %+v from %q", ev.Source, m.From)
					}
				}
			}
		}
	})
}

// tenantTapsNone knows no live prompt.
type tenantTapsNone struct{}

func (tenantTapsNone) native(string, string) bool { return false }
func (tenantTapsNone) prompt(string, string) bool { return false }

// FuzzNormalizeFixture feeds arbitrary fixture raw/context pairs (what
// `connector conformance events` reads from a file): no panic.
func FuzzNormalizeFixture(f *testing.F) {
	f.Add([]byte(`{"object":"whatsapp_business_account","entry":[]}`), []byte(`{"adapter_config":{"allow_from":["+1"]},"seen_wamids":["a"]}`))
	f.Add([]byte(`[]`), []byte(`null`))
	f.Fuzz(func(t *testing.T, raw, ctx []byte) {
		if !json.Valid(ctx) {
			ctx = nil
		}
		_, _ = NormalizeFixture(raw, ctx)
	})
}

// FuzzSignature: only the HMAC of the body under the app secret passes.
func FuzzSignature(f *testing.F) {
	p := &Platform{cfg: Config{AppSecret: testSecret}}
	f.Add([]byte(`{"object":"x"}`), "sha256=00")
	f.Add([]byte(``), whatsapptest.Sign(testSecret, nil))
	ok := func(body []byte, header string) bool {
		sig, parsed := parseSignature(header)
		return parsed && p.signed(body, sig)
	}
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		want := whatsapptest.Sign(testSecret, body)
		if !ok(body, want) {
			t.Fatal("the right signature was refused")
		}
		if ok(body, header) && !strings.EqualFold(strings.TrimSpace(header), want) {
			t.Fatalf("header %q passed for a body signed %q", header, want)
		}
	})
}

// FuzzFormatMessage: the conversion never panics, keeps valid UTF-8 valid,
// and leaves code fences as they were.
func FuzzFormatMessage(f *testing.F) {
	for _, s := range []string{"**b** *i* __u__ ~~s~~", "# *Title*\n[t](u)", "```\n*x*\n``` `*y*`", "* a\n* b", "\u200b\u00a0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := formatMessage(s)
		if utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("%q became invalid UTF-8 %q", s, out)
		}
	})
}

// FuzzGraphError: any error answer of the Graph API becomes a GraphError
// with a bounded message, never a panic.
func FuzzGraphError(f *testing.F) {
	f.Add(500, []byte(`{"error":{"message":"(#131047) Re-engagement message","code":131047,"error_data":{"details":"x"}}}`))
	f.Add(429, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := &http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body))}
		var ge *GraphError
		if !errors.As(graphError(resp), &ge) || ge.Status != status || len(ge.Message) > 300 || len(ge.Details) > 300 {
			t.Fatalf("%+v", ge)
		}
		_ = ge.Error()
	})
}

// FuzzWebhook posts arbitrary bodies, each under a valid signature (what
// Meta, or anyone holding the app secret, can send), through the whole
// POST /whatsapp/webhook handler: decoding, statuses, the link command,
// routing, the gate, media and delivery. It is seeded with every
// whatsapp_cloud payload of the shared fixtures. The handler answers 200,
// 400, or 413 past max_webhook_bytes, never panics, and delivers only to a
// configured tenant, into the sender's DM under its session key.
func FuzzWebhook(f *testing.F) {
	data, err := os.ReadFile("../../testdata/platform_events_slack_whatsapp.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Platform string          `json:"platform"`
		Raw      json.RawMessage `json:"raw"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		if c.Platform == platformName {
			f.Add([]byte(c.Raw))
		}
	}
	f.Add(whatsapptest.Text(biz3, "447700900123", "Ada", "wamid.L1", "/link GOOD"))
	f.Add(whatsapptest.Tap(biz2, "447700900123", "", "wamid.2", "wamid.1", "hp1:p:o", "O", true))
	f.Add(whatsapptest.Status(biz1, "447700900123", "wamid.1", "failed", 131026))
	f.Add(whatsapptest.Message(biz1, "447700900123", "Ada", map[string]any{"id": "wamid.M", "type": "image", "image": map[string]any{"id": "m1", "mime_type": "image/png"}}))
	r := newRig(f, nil, func(_ *Config, d *platform.Deps) { d.Linker = linker{} })
	limit := r.p.cfg.MaxWebhookBytes
	f.Fuzz(func(t *testing.T, body []byte) {
		checked := platformtest.NewSink(0)
		checked.Check = func(d platform.Delivery) error {
			if d.Platform != platformName || (d.Tenant != "t1" && d.Tenant != "t2") || d.ChatID == "" {
				t.Fatalf("delivery %+v", d)
			}
			if ev := d.Event; ev != nil && (ev.Source.ChatType != "dm" || ev.Source.ChatID != d.ChatID ||
				d.SessionKey != session.Key(&ev.Source, session.DefaultOptions)) {
				t.Fatalf("delivery to %q under %q of %+v", d.Tenant, d.SessionKey, ev.Source)
			}
			return nil
		}
		var sink platform.Sink = checked
		r.p.sink.Store(&sink)
		rec := httptest.NewRecorder()
		r.p.serveWebhook(rec, whatsapptest.SignedRequest("http://connector.test"+WebhookPath, testSecret, body))
		switch {
		case rec.Code == http.StatusOK, rec.Code == http.StatusBadRequest:
		case rec.Code == http.StatusRequestEntityTooLarge && int64(len(body)) > limit:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
