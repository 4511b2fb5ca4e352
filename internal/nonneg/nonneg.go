// Package nonneg checks that a config section's numbers are not negative,
// and that its durations, when set, are not too short to mean anything:
// one owner for the checks the connector's own sections and the platforms'
// validators make.
package nonneg

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Least is the shortest duration a section's key may be set to: zero
// stands for a default, and a duration such as 1ns is no setting (a timer
// or ticker that short spins, a TTL that short expires at once).
const Least = time.Millisecond

// Check returns an error naming, as prefix followed by its yaml key, the
// first number or duration field of the struct section points to that is
// negative or NaN (.nan in YAML, which every comparison lets through), or
// a duration set (positive) but shorter than Least; the keys
// in mayBeNegative (where negative means "off" or "no limit") are not
// checked for a sign.
func Check(prefix string, section any, mayBeNegative ...string) error {
	durationType := reflect.TypeFor[time.Duration]()
	return first(section, func(name string, f reflect.Value) error {
		switch {
		case f.CanInt() && f.Int() < 0 && !slices.Contains(mayBeNegative, name):
			return fmt.Errorf("%s%s: must not be negative", prefix, name)
		case f.CanFloat() && math.IsNaN(f.Float()):
			return fmt.Errorf("%s%s: must be a number", prefix, name)
		case f.CanFloat() && f.Float() < 0 && !slices.Contains(mayBeNegative, name):
			return fmt.Errorf("%s%s: must not be negative", prefix, name)
		case f.Type() == durationType && f.Int() > 0 && time.Duration(f.Int()) < Least:
			return fmt.Errorf("%s%s: %v is shorter than %v; leave it unset for the default", prefix, name, time.Duration(f.Int()), Least)
		}
		return nil
	})
}

// first returns the first error of check over the yaml-keyed fields of
// the struct section points to.
func first(section any, check func(name string, f reflect.Value) error) error {
	v := reflect.ValueOf(section).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if err := check(name, v.Field(i)); err != nil {
			return err
		}
	}
	return nil
}
