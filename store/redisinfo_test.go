package store

import "testing"

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"7.0.15", true}, {"6.2.0", true}, {"6.2", true}, {"10.0.0", true},
		{"6.0.16", false}, {"5.0.7", false}, {"6", false}, {"", false}, {"x.y", false},
	} {
		if got := versionAtLeast(c.v, "6.2"); got != c.want {
			t.Errorf("versionAtLeast(%q, 6.2) = %v", c.v, got)
		}
	}
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Errorf("infoField = %q", v)
	}
}
