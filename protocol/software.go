package protocol

import (
	"runtime/debug"
	"strconv"
	"strings"
)

// Software names the build of the running program, for operators: its
// module version ("(devel)" for a build from a checkout), the VCS
// revision when the build recorded one (go build records it unless
// -buildvcs=false), the Go version, and this protocol's version, e.g.
// "bmedge (devel) rev 1a2b3c4d5e6f go1.24.1 protocol v1".
func Software() string {
	var b strings.Builder
	b.WriteString("bmedge")
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		if v == "" {
			v = "(devel)" // a test binary
		}
		b.WriteString(" " + v)
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+changes"
				}
			}
		}
		if rev != "" {
			b.WriteString(" rev " + rev[:min(12, len(rev))] + dirty)
		}
		b.WriteString(" " + bi.GoVersion)
	}
	b.WriteString(" protocol v" + strconv.Itoa(Version))
	return b.String()
}
