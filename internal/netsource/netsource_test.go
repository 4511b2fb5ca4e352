package netsource

import "testing"

func TestOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:443":              "192.0.2.7",
		"[::ffff:192.0.2.7]:443":     "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:80":  "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"@":                          "@",
	} {
		if got := Of(addr); got != want {
			t.Errorf("Of(%s) = %q, want %q", addr, got, want)
		}
	}
}
