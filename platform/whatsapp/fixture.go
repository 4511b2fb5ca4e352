package whatsapp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"connector/platform"
	"connector/session"
)

// NormalizeFixture maps a fixture case's raw webhook payload, with its
// context (the native adapter_config, the wamids the adapter has seen, the
// native prompts' live state), to what live ingest makes of its first
// message: the event's source and fields, or the drop. It runs the same
// decoding, walk, classification and gate as live ingest;
// `connector conformance events` calls it for every whatsapp_cloud case of
// testdata/platform_events_slack_whatsapp.json.
func NormalizeFixture(raw, context json.RawMessage) (session.Outcome, error) {
	fc := &fixtureContext{}
	if len(context) > 0 && string(context) != "null" {
		if err := json.Unmarshal(context, fc); err != nil {
			return session.Outcome{}, fmt.Errorf("whatsapp: fixture context: %w", err)
		}
	}
	ac := fc.AdapterConfig
	allowAll := OptIn(ac.AllowAllUsers)
	acc, err := newAccess(TenantConfig{AllowAllUsers: &allowAll, DMPolicy: ac.DMPolicy, AllowFrom: List(ac.AllowFrom)}, nil)
	if err != nil {
		return session.Outcome{}, fmt.Errorf("whatsapp: fixture adapter_config: %w", err)
	}
	var p payload
	if err := decodePayload(raw, &p); err != nil {
		return session.Outcome{}, err
	}
	if p.Object != objectWABA {
		return session.Outcome{Drop: dropNotWABA}, nil
	}
	for _, e := range p.Entry {
		for _, c := range e.Changes {
			if c.Field != fieldMessages {
				continue
			}
			v := &c.Value
			if len(v.Messages) == 0 {
				continue
			}
			m := &v.Messages[0]
			if id := strings.TrimSpace(m.ID); id != "" && slices.Contains(fc.SeenWamids, id) {
				return session.Outcome{Drop: dropDuplicate}, nil
			}
			ev, drop := classify(m, v.contactNames(), v.Metadata.DisplayPhoneNumber, acc, fc)
			if drop != "" {
				return session.Outcome{Drop: drop}, nil
			}
			return platform.Outcome(&ev), nil
		}
	}
	for _, e := range p.Entry {
		for _, c := range e.Changes {
			if c.Field == fieldMessages && len(c.Value.Statuses) > 0 {
				return session.Outcome{Drop: dropStatus}, nil
			}
		}
	}
	return session.Outcome{Drop: dropNonMessage}, nil
}

// fixtureContext is a fixture case's context object.
type fixtureContext struct {
	AdapterConfig fixtureAdapterConfig `json:"adapter_config"`
	SeenWamids    []string             `json:"seen_wamids"`
	// The native prompts' live state: state id -> session key.
	ClarifyState      map[string]string `json:"clarify_state"`
	ExecApprovalState map[string]string `json:"exec_approval_state"`
	SlashConfirmState map[string]string `json:"slash_confirm_state"`
}

// fixtureAdapterConfig is the native adapter's config.extra in a fixture.
type fixtureAdapterConfig struct {
	AllowAllUsers bool     `json:"allow_all_users"`
	DMPolicy      string   `json:"dm_policy"`
	AllowFrom     []string `json:"allow_from"`
}

// native implements taps from the context's state maps.
func (fc *fixtureContext) native(prefix, stateID string) bool {
	state := map[string]map[string]string{"cl:": fc.ClarifyState, "appr:": fc.ExecApprovalState, "sc:": fc.SlashConfirmState}[prefix]
	_, ok := state[stateID]
	return ok
}

// prompt implements taps: a fixture knows no prompt of the connector's.
func (*fixtureContext) prompt(string, string) bool { return false }
