package telegram

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"connector/internal/nativecfg"
)

// This file owns how the native adapter's topic settings (group_topics,
// dm_topics) are read: the YAML forms it accepts and how it matches their
// ids. An id is the text the adapter's str() or int() sees: a bare YAML
// number as YAML 1.1 reads it (012 is octal 10), a quoted one as written. docs/settings-parity.md lists every form; TestTelegramSettingsParity
// checks each row.

// TopicBindings is the value of group_topics or dm_topics: a list of
// {chat_id, topics}, or (as the native adapter also accepts for
// group_topics) a map from chat id to its topics.
type TopicBindings []TopicBinding

// UnmarshalYAML reads both forms; unknown keys are errors.
func (b *TopicBindings) UnmarshalYAML(n *yaml.Node) error {
	var out TopicBindings
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
	case n.Kind == yaml.SequenceNode:
		for _, item := range n.Content {
			var tb TopicBinding
			if err := nativecfg.ReadKnobs(item, &tb, "topic binding", bindingKeys); err != nil {
				return err
			}
			out = append(out, tb)
		}
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			var tb TopicBinding
			if err := idText(n.Content[i], &tb.ChatID); err != nil {
				return err
			}
			if err := decodeTopics(n.Content[i+1], &tb.Topics); err != nil {
				return err
			}
			out = append(out, tb)
		}
	default:
		return fmt.Errorf("line %d: want a list of {chat_id, topics} or a map of chat id to topics", n.Line)
	}
	*b = out
	return nil
}

// bindingKeys and topicKeys read the keys of a TopicBinding and of a Topic;
// null is no value.
var (
	bindingKeys = map[string]nativecfg.Knob[TopicBinding]{
		"chat_id": func(tb *TopicBinding, v *yaml.Node) error { return idText(v, &tb.ChatID) },
		"topics":  func(tb *TopicBinding, v *yaml.Node) error { return decodeTopics(v, &tb.Topics) },
	}
	topicKeys = map[string]nativecfg.Knob[Topic]{
		"thread_id": func(t *Topic, v *yaml.Node) error { return idText(v, &t.ThreadID) },
		"name":      func(t *Topic, v *yaml.Node) error { return v.Decode(&t.Name) },
	}
)

func decodeTopics(n *yaml.Node, topics *[]Topic) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: topics: want a list of {thread_id, name}", n.Line)
	}
	for _, item := range n.Content {
		var t Topic
		if err := nativecfg.ReadKnobs(item, &t, "topic", topicKeys); err != nil {
			return err
		}
		*topics = append(*topics, t)
	}
	return nil
}

// idText reads a chat or thread id as the native adapter sees it:
// nativecfg.Bridged, the str() of the value YAML 1.1 reads.
func idText(n *yaml.Node, id *string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want an id", n.Line)
	}
	*id = nativecfg.Bridged(n)
	return nil
}

// topicNames indexes topic bindings by chat and thread as the native
// adapter looks them up. For group topics (dm false) only the first entry
// of a chat is read and a thread id matches as written, so it must be the
// canonical decimal; for DM topics a thread id is read as a number, and a
// topic without a thread id or a name is skipped. Within a chat the first
// topic of a thread wins. Errors start with the binding's index.
func topicNames(bindings []TopicBinding, dm bool) (map[topicKey]string, error) {
	names := make(map[topicKey]string)
	seen := make(map[int64]bool)
	for i, b := range bindings {
		chat, err := parseChatID(b.ChatID)
		if err != nil {
			return nil, fmt.Errorf("[%d].chat_id: %q: %w", i, b.ChatID, err)
		}
		if !dm && seen[chat] {
			continue
		}
		seen[chat] = true
		for j, t := range b.Topics {
			if t.ThreadID == "" || (dm && t.Name == "") {
				continue
			}
			thread, err := topicThreadID(t.ThreadID, dm)
			if err != nil {
				return nil, fmt.Errorf("[%d].topics[%d].thread_id: %q: %w", i, j, t.ThreadID, err)
			}
			k := topicKey{chat: chat, thread: thread}
			if _, dup := names[k]; !dup {
				names[k] = t.Name
			}
		}
	}
	return names, nil
}

// topicThreadID parses a configured thread id: for a DM topic as Python's
// int() does (surrounding space, a plus sign and leading zeros allowed), for
// a group topic only in the canonical spelling it is compared in.
func topicThreadID(s string, dm bool) (int, error) {
	text := s
	if dm {
		text = strings.TrimPrefix(strings.TrimSpace(s), "+")
	}
	n, err := strconv.Atoi(text)
	switch {
	case err != nil || n <= 0:
		return 0, fmt.Errorf("want a positive integer")
	case !dm && strconv.Itoa(n) != s:
		return 0, fmt.Errorf("the native adapter compares group thread ids as written, so this never matches; write %d", n)
	}
	return n, nil
}
