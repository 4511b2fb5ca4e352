package contract

import (
	"errors"
	"fmt"
	"strings"
)

// The prompt op's callback token (contract §4 "prompt"): every button a
// prompt puts on a message carries "hp1:<prompt_id>:<option_id>", at most
// MaxPromptTokenBytes long (Telegram's callback_data cap binds every
// platform), ids of 1 to MaxPromptIDLen characters of [A-Za-z0-9_.-].
const (
	promptTokenPrefix   = "hp1:"
	MaxPromptTokenBytes = 64
	MaxPromptIDLen      = 32
)

// ValidPromptID reports whether s is a well-formed prompt or option id.
func ValidPromptID(s string) bool {
	return s != "" && len(s) <= MaxPromptIDLen &&
		strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == ""
}

// PromptToken returns the callback token of one option of a prompt.
func PromptToken(promptID, optionID string) (string, error) {
	if !ValidPromptID(promptID) {
		return "", errors.New("prompt_id must be 1-32 characters of [A-Za-z0-9_.-]")
	}
	if !ValidPromptID(optionID) {
		return "", fmt.Errorf("option id %.40q must be 1-32 characters of [A-Za-z0-9_.-]", optionID)
	}
	tok := promptTokenPrefix + promptID + ":" + optionID
	if len(tok) > MaxPromptTokenBytes {
		return "", fmt.Errorf("hp1:<prompt_id>:<option_id> is %d bytes, over %d", len(tok), MaxPromptTokenBytes)
	}
	return tok, nil
}

// ParsePromptToken reads a callback token back. ok is false for anything
// PromptToken would not have produced: another integration's callback data.
func ParsePromptToken(data string) (promptID, optionID string, ok bool) {
	if len(data) > MaxPromptTokenBytes {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(data, promptTokenPrefix)
	if !ok {
		return "", "", false
	}
	promptID, optionID, ok = strings.Cut(rest, ":")
	if !ok || !ValidPromptID(promptID) || !ValidPromptID(optionID) {
		return "", "", false
	}
	return promptID, optionID, true
}

// PromptButton is one option of a checked prompt, with its callback token.
type PromptButton struct {
	PromptOption
	Token string
}

// PromptButtons checks a prompt action (content, prompt_id, 1 to
// maxOptions options with distinct ids and non-blank labels) and returns
// its buttons in order. The error text is safe to return to the gateway.
func PromptButtons(a *Action, maxOptions int) ([]PromptButton, error) {
	switch {
	case strings.TrimSpace(a.Content) == "":
		return nil, errors.New("prompt needs content (the question)")
	case len(a.Options) == 0:
		return nil, errors.New("prompt needs at least one option")
	case len(a.Options) > maxOptions:
		return nil, fmt.Errorf("prompt has %d options, at most %d fit", len(a.Options), maxOptions)
	}
	out := make([]PromptButton, 0, len(a.Options))
	seen := make(map[string]bool, len(a.Options))
	for _, o := range a.Options {
		tok, err := PromptToken(a.PromptID, o.ID)
		if err != nil {
			return nil, err
		}
		if seen[o.ID] {
			return nil, fmt.Errorf("option id %q appears twice", o.ID)
		}
		seen[o.ID] = true
		if strings.TrimSpace(o.Label) == "" {
			return nil, fmt.Errorf("option %q has no label", o.ID)
		}
		out = append(out, PromptButton{PromptOption: o, Token: tok})
	}
	return out, nil
}

// PromptStyle values the gateway may put on an option.
const (
	StylePrimary   = "primary"
	StyleSecondary = "secondary"
	StyleSuccess   = "success"
	StyleDanger    = "danger"
)
