package slack

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"connector/internal/pytext"
)

// This file reads a message's Block Kit blocks and link unfurls as the
// native adapter does: the mentions authored only in blocks count for
// mention detection (_collect_slack_block_mentions), rich text the flat
// text lacks (a quoted or forwarded message, a pasted table) is appended
// to it (_extract_additional_text_from_slack_blocks), and link previews
// follow (_append_link_unfurls). Blocks are outside input: every walk is
// bounded by maxBlockNodes.

// maxBlockNodes bounds the nodes a block walk visits; the rest are
// ignored.
const maxBlockNodes = 10_000

// blockNode is a decoded Block Kit node.
type blockNode = map[string]any

// decodeBlocks decodes a message's blocks; nil when absent or not a list.
func decodeBlocks(raw json.RawMessage) []any {
	if !pytext.Truthy(raw) {
		return nil
	}
	var blocks []any
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	return blocks
}

// str is a node's string field ("" for other types).
func str(n blockNode, key string) string {
	s, _ := n[key].(string)
	return s
}

// pyStr is Python's str() of a JSON value in a format string.
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// blockMentions returns the <@USER> mentions of non-quoted user elements
// (a rich_text_quote's mentions cannot summon the bot).
func blockMentions(blocks []any) []string {
	var out []string
	visited := 0
	var walk func(v any, quoted bool)
	walk = func(v any, quoted bool) {
		if visited++; visited > maxBlockNodes {
			return
		}
		switch x := v.(type) {
		case []any:
			for _, item := range x {
				walk(item, quoted)
			}
		case blockNode:
			typ := str(x, "type")
			q := quoted || typ == "rich_text_quote"
			if id := str(x, "user_id"); typ == "user" && !q && id != "" {
				out = append(out, "<@"+id+">")
			}
			for _, key := range []string{"elements", "element"} {
				if child, ok := x[key]; ok && child != nil {
					walk(child, q)
				}
			}
		}
	}
	walk(blocks, false)
	return out
}

// mentionText is the text mentions are detected in: the flat text plus
// the block-only mentions it lacks (_slack_mention_detection_text).
func mentionText(text string, blocks []any) string {
	var extra []string
	for _, m := range blockMentions(blocks) {
		if !strings.Contains(text, m) {
			extra = append(extra, m)
		}
	}
	if len(extra) == 0 {
		return text
	}
	return strings.TrimSpace(strings.TrimSpace(text) + "\n" + strings.Join(extra, " "))
}

// inlineFormats are the rich-text entities rendered as mrkdwn:
// format, the field read, its default.
var inlineFormats = map[string][3]string{
	"channel":   {"<#%s>", "channel_id", ""},
	"user":      {"<@%s>", "user_id", ""},
	"usergroup": {"<!subteam^%s>", "usergroup_id", ""},
	"team":      {"<!team^%s>", "team_id", ""},
	"emoji":     {":%s:", "name", ""},
	"broadcast": {"<!%s>", "range", "here"},
}

// renderInline renders one inline rich-text element.
func renderInline(el blockNode) string {
	typ := str(el, "type")
	switch typ {
	case "text":
		return str(el, "text")
	case "color":
		return str(el, "value")
	}
	if f, ok := inlineFormats[typ]; ok {
		v, present := el[f[1]]
		if !present {
			v = f[2]
		}
		return fmt.Sprintf(f[0], pyStr(v))
	}
	if fb := str(el, "fallback"); typ == "date" && fb != "" {
		return fb
	}
	url := str(el, "url")
	label := cmp.Or(str(el, "text"), str(el, "fallback"))
	if url == "" && typ == "message_mention" {
		if ch, ts := pyStr(el["channel_id"]), pyStr(el["message_ts"]); el["channel_id"] != nil && el["message_ts"] != nil && ch != "" && ts != "" {
			url = "archives/" + ch + "/p" + strings.ReplaceAll(ts, ".", "")
		}
	}
	switch {
	case url != "" && label != "" && label != url:
		return label + " (" + url + ")"
	case url != "":
		return url
	}
	return label
}

func renderInlines(elements any) string {
	items, _ := elements.([]any)
	var b strings.Builder
	for _, it := range items {
		if el, ok := it.(blockNode); ok {
			b.WriteString(renderInline(el))
		}
	}
	return b.String()
}

// richText renders rich_text blocks to lines (quotes, lists, code) and
// table blocks as "cell | cell" rows (_extract_text_from_slack_blocks).
func richText(blocks []any) string {
	var parts []string
	visited := 0
	line := func(text string, depth int, bullet string) {
		if strings.TrimSpace(text) == "" {
			return
		}
		prefix := ""
		if depth > 0 {
			prefix = strings.Repeat(">", depth) + " "
		}
		parts = append(parts, strings.TrimRight(prefix+bullet+text, " \t\n\r\v\f"))
	}
	var walk func(elements []any, depth int, bullet string)
	walk = func(elements []any, depth int, bullet string) {
		for _, it := range elements {
			if visited++; visited > maxBlockNodes {
				return
			}
			el, ok := it.(blockNode)
			if !ok {
				continue
			}
			children, _ := el["elements"].([]any)
			switch str(el, "type") {
			case "rich_text_section":
				line(renderInlines(el["elements"]), depth, bullet)
			case "rich_text_quote":
				walk(children, depth+1, "")
			case "rich_text_list":
				for i, item := range children {
					b := strconv.Itoa(i+1) + ". "
					if str(el, "style") == "bullet" {
						b = "• "
					}
					walk([]any{item}, depth, b)
				}
			case "rich_text_preformatted":
				var code []string
				for _, c := range children {
					child, ok := c.(blockNode)
					if !ok {
						continue
					}
					var l string
					if str(child, "type") == "rich_text_section" {
						l = renderInlines(child["elements"])
					} else {
						l = renderInline(child)
					}
					if l != "" {
						code = append(code, l)
					}
				}
				if len(code) > 0 {
					line("```"+str(el, "language")+"\n"+strings.Join(code, "\n")+"\n```", depth, bullet)
				}
			default:
				line(renderInline(el), depth, bullet)
			}
		}
	}
	for _, b := range blocks {
		block, ok := b.(blockNode)
		if !ok {
			continue
		}
		switch str(block, "type") {
		case "rich_text":
			children, _ := block["elements"].([]any)
			walk(children, 0, "")
		case "table":
			if t := tableText(block); t != "" {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}

// maxTableChars bounds a pasted table's rendering.
const maxTableChars = 20_000

// tableText renders a table block's rows as "cell | cell" lines.
func tableText(block blockNode) string {
	rows, _ := block["rows"].([]any)
	var lines []string
	for _, r := range rows {
		row, ok := r.([]any)
		if !ok {
			continue
		}
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = cellText(c)
		}
		if l := strings.Join(cells, " | "); strings.Trim(l, " |") != "" {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "\n")
	if len([]rune(text)) > maxTableChars {
		text = strings.TrimRight(string([]rune(text)[:maxTableChars-20]), " \t\n") + "\n[table truncated]"
	}
	return text
}

// cellText joins the text leaves of a table cell.
func cellText(v any) string {
	var parts []string
	visited := 0
	var visit func(v any)
	visit = func(v any) {
		if visited++; visited > maxBlockNodes {
			return
		}
		switch x := v.(type) {
		case []any:
			for _, it := range x {
				visit(it)
			}
		case blockNode:
			if t, ok := x["text"].(string); ok && t != "" {
				parts = append(parts, t)
			}
			for _, child := range x {
				visit(child)
			}
		}
	}
	visit(v)
	return strings.TrimSpace(strings.Join(parts, " "))
}

// Patterns of _normalize_slack_text_for_dedupe. Go's regexp has no
// backreferences or lookarounds: the fence's backtick guards and the
// style delimiters are checked in code.
var (
	mrkdwnLink   = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.\-]*:[^>|]+)(?:\|([^>]+))?>`)
	entityLabel  = regexp.MustCompile(`<([@#!][^>|]*)\|[^>]*>`)
	fencedCode   = regexp.MustCompile("(?s)\n*```[ \t]*\n?(.*?)\n?[ \t]*```\n*")
	inlineCode   = regexp.MustCompile("`([^`\n]+)`")
	slackDate    = regexp.MustCompile(`<!date\^([^>|]*)(?:\|([^>]*))?>`)
	permalink    = regexp.MustCompile(`https?://[^\s/]+/(archives/[A-Za-z0-9]+/p\d+)(?:\?[^\s)]*)?`)
	inlineStyles = []*regexp.Regexp{regexp.MustCompile(`\*([^\n]+?)\*`), regexp.MustCompile(`_([^\n]+?)_`), regexp.MustCompile(`~([^\n]+?)~`)}
	whitespace   = regexp.MustCompile(`\s+`)
	htmlEntity   = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")
)

// fences returns the matches of fencedCode not touching another backtick
// (the pattern's (?<!`) and (?!`)).
func fences(s string) [][]int {
	var out [][]int
	for _, m := range fencedCode.FindAllStringSubmatchIndex(s, -1) {
		if (m[0] > 0 && s[m[0]-1] == '`') || (m[1] < len(s) && s[m[1]] == '`') {
			continue
		}
		out = append(out, m)
	}
	return out
}

// dedupeForm is text in the form flat text and rendered rich text are
// compared in.
func dedupeForm(text, bot string) string {
	s := htmlEntity.Replace(text)
	s = mrkdwnLink.ReplaceAllStringFunc(s, func(m string) string {
		g := mrkdwnLink.FindStringSubmatch(m)
		if g[2] != "" && g[2] != g[1] {
			return g[2] + " (" + g[1] + ")"
		}
		return g[1]
	})
	s = slackDate.ReplaceAllStringFunc(s, func(m string) string {
		g := slackDate.FindStringSubmatch(m)
		if g[2] != "" {
			return g[2]
		}
		if parts := strings.Split(g[1], "^"); len(parts) > 2 {
			return parts[2]
		}
		return ""
	})
	s = permalink.ReplaceAllString(s, "$1")
	s = entityLabel.ReplaceAllString(s, "<$1>")
	if bot != "" {
		s = strings.ReplaceAll(s, "<@"+bot+">", "")
	}
	var b strings.Builder
	last := 0
	for _, m := range fences(s) {
		b.WriteString(s[last:m[0]])
		b.WriteString(s[m[2]:m[3]])
		last = m[1]
	}
	b.WriteString(s[last:])
	s = inlineCode.ReplaceAllString(b.String(), "$1")
	for {
		next := s
		for _, re := range inlineStyles {
			next = re.ReplaceAllString(next, "$1")
		}
		if next == s {
			break
		}
		s = next
	}
	return strings.TrimSpace(whitespace.ReplaceAllString(s, " "))
}

// blockTextAddition is the rich text of blocks that text does not already
// hold (_extract_additional_text_from_slack_blocks).
func blockTextAddition(blocks []any, text, bot string) string {
	primary := dedupeForm(text, bot)
	primaryFenced := map[string]bool{}
	for _, m := range fences(text) {
		primaryFenced[dedupeForm(text[m[0]:m[1]], bot)] = true
	}
	var parts []string
	for _, b := range blocks {
		block, ok := b.(blockNode)
		if !ok {
			continue
		}
		switch str(block, "type") {
		case "table":
			if t := tableText(block); t != "" {
				parts = append(parts, t)
			}
			continue
		case "rich_text":
		default:
			continue
		}
		elements, _ := block["elements"].([]any)
		for _, e := range elements {
			el, ok := e.(blockNode)
			if !ok {
				continue
			}
			rendered := strings.TrimSpace(richText([]any{blockNode{"type": "rich_text", "elements": []any{el}}}))
			if rendered == "" {
				continue
			}
			norm := dedupeForm(rendered, bot)
			dup := norm == primary || strings.Contains(primary, norm)
			if str(el, "type") == "rich_text_preformatted" {
				dup = primaryFenced[norm]
			}
			if norm != "" && dup {
				continue
			}
			parts = append(parts, rendered)
		}
	}
	return strings.Join(parts, "\n")
}

// withBlockText appends the blocks' rich text that text lacks.
func withBlockText(text string, blocks []any, bot string) string {
	if add := strings.TrimSpace(blockTextAddition(blocks, text, bot)); add != "" {
		return strings.TrimSpace(strings.TrimSpace(text) + "\n" + add)
	}
	return text
}

// maxUnfurlBody bounds one link preview's text, as natively.
const maxUnfurlBody = 500

// withUnfurls appends the message's link previews (_append_link_unfurls),
// with the rich text and tables of their own blocks; previews of Slack
// messages (is_msg_unfurl) are skipped.
func withUnfurls(text string, unfurls []wireUnfurl) string {
	var sections []string
	for _, u := range unfurls {
		if u.IsMsgUnfurl {
			continue
		}
		url := cmp.Or(u.TitleLink, u.FromURL)
		header := ""
		switch {
		case u.Title != "" && url != "":
			header = "📎 [" + u.Title + "](" + url + ")"
		case u.Title != "" || url != "":
			header = "📎 " + u.Title + url
		}
		body := strings.TrimSpace(cmp.Or(u.Text, u.Fallback))
		if r := []rune(body); len(r) > maxUnfurlBody {
			body = string(r[:maxUnfurlBody-3]) + "..."
		}
		// A pasted table arrives as the attachment's table block, in
		// neither its text nor its fallback.
		if nested := richText(decodeBlocks(u.Blocks)); nested != "" && !strings.Contains(body, nested) {
			if body == "" {
				body = nested
			} else {
				body = strings.TrimSpace(body + "\n" + nested)
			}
		}
		var section string
		switch {
		case header != "" && body != "":
			section = header + "\n   " + body
		case header != "":
			section = header
		case body != "":
			section = "📎 " + body
		default:
			continue
		}
		if strings.Contains(text, section) {
			continue
		}
		if u.Footer != "" {
			section += "\n   _" + u.Footer + "_"
		}
		sections = append(sections, section)
	}
	if len(sections) == 0 {
		return text
	}
	return strings.TrimSpace(strings.TrimSpace(text) + "\n\n" + strings.Join(sections, "\n\n"))
}
