package doctabletest

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Columns of the limits tables CheckDefaults reads: a row per limit whose
// columns are description, default, set by, on the wire.
const (
	limitsDefaultCol = 1
	limitsSetByCol   = 2
)

// CheckDefaults checks the limits table under heading in path against cfg,
// a configuration struct (or pointer to one) with its defaults filled in:
// every configuration key prefix.name in a code span of a row's "set by"
// column must name a field of cfg (by its yaml tag, or by its Go name
// written in snake_case), and the row's "default" column must state that
// field's value, as FormatDefault writes it. It returns one error per
// mismatch and the number of keys checked.
func CheckDefaults(path, heading, prefix string, cfg any) (int, []error) {
	rows, err := Rows(path, heading)
	if err != nil {
		return 0, []error{err}
	}
	v := reflect.Indirect(reflect.ValueOf(cfg))
	keyRe := regexp.MustCompile("`" + regexp.QuoteMeta(prefix) + `\.([a-z0-9_]+)` + "`")
	checked := 0
	var errs []error
	for _, r := range rows {
		if len(r) <= limitsSetByCol {
			continue
		}
		for _, m := range keyRe.FindAllStringSubmatch(r[limitsSetByCol], -1) {
			key := prefix + "." + m[1]
			f, ok := field(v, m[1])
			if !ok {
				errs = append(errs, fmt.Errorf("%s: %s names no configuration key", path, key))
				continue
			}
			checked++
			want := FormatDefault(m[1], f.Interface())
			if !containsValue(r[limitsDefaultCol], want) {
				errs = append(errs, fmt.Errorf("%s: the default of %s is %s in the code, the table says %q", path, key, want, r[limitsDefaultCol]))
			}
		}
	}
	return checked, errs
}

// field finds the field of struct v named name in yaml or in snake_case.
func field(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if tag == name || (tag == "" && snake(sf.Name) == name) {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// snake writes a Go name in snake_case: MaxConnsPerGateway is
// max_conns_per_gateway.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FormatDefault writes a default as the limits tables do: durations in the
// largest whole unit ("10 s", "60 s", "2 min", "168 h"), sizes (keys
// naming bytes, a payload or a file) in whole KiB or MiB ("64 KiB",
// "8 MiB"), other numbers with thousands separators ("1,024").
func FormatDefault(key string, v any) string {
	switch x := v.(type) {
	case time.Duration:
		switch {
		case x%time.Hour == 0:
			return fmt.Sprintf("%d h", x/time.Hour)
		case x%time.Minute == 0 && x >= 5*time.Minute:
			return fmt.Sprintf("%d min", x/time.Minute)
		case x%time.Second == 0:
			return fmt.Sprintf("%d s", x/time.Second)
		}
		return fmt.Sprintf("%d ms", x/time.Millisecond)
	case int:
		return formatInt(key, int64(x))
	case int64:
		return formatInt(key, x)
	}
	return fmt.Sprint(v)
}

func formatInt(key string, n int64) string {
	if strings.Contains(key, "bytes") || strings.HasSuffix(key, "payload") || strings.HasSuffix(key, "file") {
		switch {
		case n > 0 && n%(1<<20) == 0:
			return fmt.Sprintf("%d MiB", n>>20)
		case n > 0 && n%(1<<10) == 0:
			return fmt.Sprintf("%d KiB", n>>10)
		}
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// containsValue reports whether cell states want as a whole value: not as
// part of a longer number.
func containsValue(cell, want string) bool {
	for i := 0; ; {
		j := strings.Index(cell[i:], want)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(want)
		if (start == 0 || !isNumeric(cell, start-1)) && (end == len(cell) || !isNumeric(cell, end)) {
			return true
		}
		i = start + 1
	}
}

// isNumeric reports whether cell[i] continues a number: a digit, or a
// separator followed by one ("1,024" and "0.5", not "1,024, or").
func isNumeric(cell string, i int) bool {
	c := cell[i]
	if c == ',' || c == '.' {
		return i+1 < len(cell) && cell[i+1] >= '0' && cell[i+1] <= '9'
	}
	return c >= '0' && c <= '9'
}
