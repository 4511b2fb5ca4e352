package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// Set by a release build with
// -ldflags "-X main.buildVersion=v1.2.3 -X main.buildCommit=<git sha>";
// otherwise read from the binary's build info.
var (
	buildVersion string
	buildCommit  string
)

// buildDetails is what the binary knows of how it was built.
type buildDetails struct {
	Version   string // module or release version; "devel" without one
	Commit    string // VCS revision, "+dirty" when modified; "unknown" without one
	GoVersion string
}

// readBuildDetails reports the binary's version and commit: -ldflags values first, then
// the module version and VCS stamps of the build info.
func readBuildDetails() buildDetails {
	d := buildDetails{Version: buildVersion, Commit: buildCommit, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if d.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			d.Version = info.Main.Version
		}
		if d.Commit == "" && rev != "" {
			d.Commit = rev + dirty
		}
	}
	d.Version = cmp.Or(d.Version, "devel")
	d.Commit = cmp.Or(d.Commit, "unknown")
	return d
}

// version is the one-word version the banner prints: the version, with a
// development build's short commit.
func version() string {
	d := readBuildDetails()
	if d.Version == "devel" && d.Commit != "unknown" {
		return "devel-" + d.Commit[:min(len(d.Commit), 12)]
	}
	return d.Version
}
