package boot

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseCmdline feeds arbitrary kernel command lines to ParseCmdline,
// which the ramdisk agent runs on /proc/cmdline before anything else: a
// panic there is a node that boots into a reboot loop. A command line it
// accepts must name the node and, for a static address, a usable one;
// String (what the agent logs) must redact every secret parameter.
func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{
		`BOOT_IMAGE=/vmlinuz console=ttyS0  panic=1 bm.password="a b\c" "bm.site=x y"` + "\n",
		`console=ttyS0 panic=1 bm.node=test bm.ip=10.0.2.15/24 bm.gw=10.0.2.2 bm.dns=10.0.2.3,1.1.1.1 bm.broker=mqtt://10.0.2.2:1883 bm.site=s1 bm.user=node-test bm.password="s3cret x" bm.future=1 bm.node=test2`,
		"bm.node=n1 bm.ip=DHCP bm.debug",
		"bm.node=n BOOTIF=01-52-54-00-12-34-56",
		"bm.node=n bm.mac=52:54:00:aa:bb:cc BOOTIF=01-52-54-00-12-34-56 bm.iface=eth1",
		"bm.node=n bm.ip=fd00::15/64 bm.gw=fd00::1 bm.dns=fd00::53",
		"bm.node=n bm.ip=10.0.2.15/24 bm.gw=fe80::1",
		"bm.node=n bm.ip=10.0.2.0/24",
		"bm.node=n BOOTIF=garbage",
		"console=ttyS0 bm.ip=10.0.2.15/24",
		`a="" b "unterminated`,
		"bm.node=n bm.agent_token=abc bm.Secret_key=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		words := SplitCmdline(cmdline)
		for _, w := range words {
			if strings.ContainsRune(w, '"') {
				t.Fatalf("SplitCmdline(%q) left a quote in %q", cmdline, w)
			}
		}
		// Without quotes the kernel splits on white space only. (Invalid
		// UTF-8 is left out: SplitCmdline walks runes and writes U+FFFD
		// for a stray byte, see docs/security.md.)
		if !strings.ContainsRune(cmdline, '"') && utf8.ValidString(cmdline) {
			want := strings.FieldsFunc(cmdline, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' })
			if !slices.Equal(words, want) && !(len(words) == 0 && len(want) == 0) {
				t.Fatalf("SplitCmdline(%q) = %q, want %q", cmdline, words, want)
			}
		}

		p, err := ParseCmdline(cmdline)
		for k, v := range p.All {
			if isSecret(k) {
				if got := (Params{All: map[string]string{k: v}}).String(); got != k+"=<redacted>" {
					t.Fatalf("secret parameter %s logged as %q", k, got)
				}
			}
		}
		if err != nil {
			if errors.Is(err, ErrNoNode) && p.Node != "" {
				t.Fatalf("ErrNoNode with node %q", p.Node)
			}
			return
		}
		if p.Node == "" || p.All["bm.node"] != p.Node {
			t.Fatalf("accepted without bm.node: %+v", p)
		}
		switch p.Net.Mode {
		case IPDHCP:
		case IPStatic:
			a := p.Net.Addr.Addr()
			if !p.Net.Addr.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
				t.Fatalf("accepted static address %v", p.Net.Addr)
			}
			if p.Net.Gateway.IsValid() && p.Net.Gateway.Is4() != a.Is4() {
				t.Fatalf("accepted gateway %v for %v", p.Net.Gateway, p.Net.Addr)
			}
		default:
			t.Fatalf("unknown IP mode %q", p.Net.Mode)
		}
		if p.Net.MAC != nil && len(p.Net.MAC) == 0 {
			t.Fatalf("empty MAC accepted")
		}
	})
}

// FuzzModalias feeds a modules.alias table and a modalias string to
// ParseAliases and Match, which choose the kernel modules the ramdisk
// loads at boot from what the hardware reports in sysfs. Glob backtracks
// on '*', so this also watches for patterns that make it run away.
func FuzzModalias(f *testing.F) {
	f.Add(aliasFixture, "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00")
	f.Add(aliasFixture, "dmi:bvnLENOVO:bvrN1EET:svnLENOVO:pn20A7:pvrThinkPadX41:")
	f.Add(aliasFixture, "acpi:PNP0A08:")
	f.Add("alias pci:v*d*sv*sd*bc01sc08i02* nvme\n", "pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02")
	f.Add("alias a[!]b]* x\nalias \\*[a-] y\n", "a]b]c")
	f.Add("alias *a*a*a*a*a*a*a*b z\n", strings.Repeat("a", 200))
	f.Add("alias onlytwo\n", "x")
	f.Fuzz(func(t *testing.T, table, modalias string) {
		tab, err := ParseAliases(strings.NewReader(table))
		if err != nil {
			return
		}
		mods := tab.Match(modalias)
		seen := map[string]bool{}
		for _, m := range mods {
			if seen[m] {
				t.Fatalf("module %s matched twice", m)
			}
			seen[m] = true
		}
		for _, a := range tab.aliases {
			// A pattern without metacharacters matches only itself.
			if !strings.ContainsAny(a.Pattern, `*?[\`) && Glob(a.Pattern, modalias) != (a.Pattern == modalias) {
				t.Fatalf("Glob(%q, %q) = %v", a.Pattern, modalias, !(a.Pattern == modalias))
			}
			if !Glob("*", a.Pattern) {
				t.Fatalf(`Glob("*", %q) = false`, a.Pattern)
			}
		}
		_ = tab.ModulesFor([]string{modalias}, map[string]bool{"virtio_pci": true})
	})
}
