package main

import (
	"cmp"
	"reflect"
	"strings"
)

// This file owns the list of config keys: docs/configuration.md and the
// environment variables are both made from it, so a key cannot have a row
// without a variable or a variable without a row.

// configKey is one key of the config file.
type configKey struct {
	// Key is its path: relay.ack_window, tenants[].id,
	// discord.tenants.<tenant>.weight.
	Key string
	// Env is the variable that sets it; empty for a section (its keys have
	// variables) and for a key inside a list item or a map entry (the
	// list's or map's variable sets it whole).
	Env string
	// field is the struct field declaring the key.
	field reflect.StructField
	// index is the field's index path from Config (through the pointers of
	// the platform sections); nil within a list or map.
	index []int
}

// typ is the key's value type, a pointer section's struct itself.
func (k configKey) typ() reflect.Type {
	t := k.field.Type
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		return t.Elem()
	}
	return t
}

// isSection reports whether the key holds keys of its own (log, relay,
// discord).
func (k configKey) isSection() bool {
	t := k.typ()
	return t.Kind() == reflect.Struct && t.PkgPath() != "time"
}

// configKeys lists every key of the config file in document order, each
// section before its keys.
func configKeys() []configKey {
	var keys []configKey
	var walk func(t reflect.Type, prefix string, index []int, within string)
	walk = func(t reflect.Type, prefix string, index []int, within string) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			k := configKey{Key: prefix + tag, field: f}
			if within == "" {
				k.index = append(append([]int(nil), index...), i)
				if !k.isSection() {
					k.Env = envVariable(k.Key)
				}
			}
			keys = append(keys, k)
			ft := k.typ()
			inner := cmp.Or(within, k.Key)
			switch {
			case k.isSection():
				walk(ft, k.Key+".", k.index, within)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), k.Key+"[].", nil, inner)
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), k.Key+".<"+mapKeyName(tag)+">.", nil, inner)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", nil, "")
	return keys
}

// mapKeyName names the key of a map's entries in a key path.
func mapKeyName(tag string) string {
	if tag == "tenants" {
		return "tenant"
	}
	return "name"
}
