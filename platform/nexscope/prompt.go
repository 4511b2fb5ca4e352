package nexscope

import (
	"context"
	"strings"

	"connector/contract"
)

// maxPromptOptions bounds a prompt's options in the text form.
const maxPromptOptions = 25

// openPrompt is the room's unanswered prompt: the answer a member types
// ("/<option_id>") becomes its prompt_response.
type openPrompt struct {
	promptID, msgID string
	labels          map[string]string // option id -> label
}

// promptText is the documented text form of a prompt on nexscope, which
// has no buttons: the question, then one line per option, "/<option_id>:
// <label>", in order.
func promptText(question string, buttons []contract.PromptButton) string {
	text := question + "\n"
	for _, o := range buttons {
		text += "\n/" + o.ID + ": " + o.Label
	}
	return text
}

// prompt sends the question in its text form like send (same addressing)
// and makes it the room's open prompt, replacing an earlier one. A
// member's next msg to the bot whose whole text is "/<option_id>" of it is
// delivered with prompt_response (bridge), and the prompt is closed.
func (p *Platform) prompt(ctx context.Context, tenant string, r *room, a *contract.Action) contract.Result {
	buttons, err := contract.PromptButtons(a, maxPromptOptions)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "nexscope prompt: "+err.Error())
	}
	text := *a
	text.Content = promptText(a.Content, buttons)
	// One hold of mu sends the question and opens the prompt, so that the
	// prompt opens for the binding the question was sent under: the room
	// rebound, or its tenant created again, in between would have it open
	// for (and be answered to) a tenant that never asked.
	r.mu.Lock()
	defer r.unlock()
	res := p.sendLocked(ctx, tenant, r, &text)
	if !res.Success {
		return res
	}
	r.prompt = &openPrompt{promptID: a.PromptID, msgID: res.MessageID, labels: make(map[string]string, len(buttons))}
	for _, b := range buttons {
		r.prompt.labels[b.ID] = b.Label
	}
	return res
}

// answerPrompt returns the prompt_response for text when it answers the
// room's open prompt, and closes the prompt. Called under r.mu.
func (r *room) answerPrompt(text string) *contract.PromptResponse {
	op := r.prompt
	id, ok := strings.CutPrefix(strings.TrimSpace(text), "/")
	if op == nil || !ok {
		return nil
	}
	label, ok := op.labels[id]
	if !ok {
		return nil
	}
	r.prompt = nil
	return &contract.PromptResponse{PromptID: op.promptID, OptionID: id, Label: label, PromptMessageID: op.msgID}
}
