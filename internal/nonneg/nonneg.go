// Package nonneg checks that a config section's numbers are not negative:
// one owner for the check the connector's own sections and the platforms'
// validators make.
package nonneg

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Check returns an error naming, as prefix followed by its yaml key, the
// first integer or duration field of the struct section points to that is
// negative; the keys in mayBeNegative (where negative means "off" or "no
// limit") are not checked.
func Check(prefix string, section any, mayBeNegative ...string) error {
	v := reflect.ValueOf(section).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if f := v.Field(i); name != "-" && f.CanInt() && f.Int() < 0 && !slices.Contains(mayBeNegative, name) {
			return fmt.Errorf("%s%s: must not be negative", prefix, name)
		}
	}
	return nil
}
