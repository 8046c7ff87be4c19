package boot

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// Lines of a modules.alias that depmod writes for the ramdisk's module
// subset of Debian's 6.1 kernel (shortened).
const aliasFixture = `# Aliases extracted from modules themselves.
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias virtio:d00000002v* virtio_blk
alias virtio:d00000004v* virtio_rng
alias virtio:d00000008v* virtio_scsi
alias pci:v*d*sv*sd*bc01sc06i01* ahci
alias pci:v00008086d00002922sv*sd*bc*sc*i* ahci
alias pci:v*d*sv*sd*bc01sc08i02* nvme
alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000
alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e
alias scsi:t-0x00* sd_mod
alias scsi:t-0x0e* sd_mod
alias dmi*:svnLENOVO:*:pvrThinkPad[TX]4[!0]* thinkpad_fake
alias acpi*:PNP0A0[38]:* fake-acpi
`

func fixtureTable(t *testing.T) *AliasTable {
	t.Helper()
	tab, err := ParseAliases(strings.NewReader(aliasFixture))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 14 {
		t.Fatalf("parsed %d aliases", tab.Len())
	}
	return tab
}

func TestParseAliasesRejectsGarbage(t *testing.T) {
	if _, err := ParseAliases(strings.NewReader("alias only-two\n")); err == nil {
		t.Fatal("want an error")
	}
}

func TestMatchQEMUMachine(t *testing.T) {
	tab := fixtureTable(t)
	// Modaliases of a QEMU i440fx machine with virtio disk, net and rng,
	// before any module is loaded: only PCI devices are visible.
	// /sys as the kernel shows it, a device per bus entry (symbolic links
	// on a real /sys), and files that are not read: a device's other
	// attributes and modaliases of the tree below /sys/devices, which
	// ReadModaliases reaches through the bus and class lists.
	sys := fstest.MapFS{
		"bus/pci/devices/0000:00:00.0/modalias":    {Data: []byte("pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00\n")},
		"bus/pci/devices/0000:00:01.1/modalias":    {Data: []byte("pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80\n")},
		"bus/pci/devices/0000:00:03.0/modalias":    {Data: []byte("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\n")},
		"bus/pci/devices/0000:00:04.0/modalias":    {Data: []byte("pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00\n")},
		"bus/pci/devices/0000:00:05.0/modalias":    {Data: []byte("pci:v00001AF4d00001005sv00001AF4sd00000004bc00scFFi00\n")},
		"bus/pci/devices/0000:00:05.0/vendor":      {Data: []byte("0x1af4\n")},
		"bus/platform/devices/serial8250/modalias": {Data: []byte("platform:serial8250\n")},
		"bus/platform/devices/empty/modalias":      {Data: []byte("")},
		"bus/cpu/devices/cpu0/uevent":              {Data: []byte("DRIVER=processor\n")},
		"class/dmi/id/modalias":                    {Data: []byte("dmi:bvnSeaBIOS:svnQEMU:pnStandardPC(i440FX+PIIX,1996):\n")},
		"class/tty/ttyS0/dev":                      {Data: []byte("4:64\n")},
		"devices/system/cpu/modalias":              {Data: []byte("cpu:type:x86,ven0002fam000Fmod006B:feature:,0000,0002\n")},
		"devices/pci0000:00/0000:00:00.0/modalias": {Data: []byte("pci:not-read-from-here\n")},
		"devices/virtual/misc/unlisted/modalias":   {Data: []byte("never:read\n")},
	}
	aliases, err := ReadModaliases(sys)
	if err != nil {
		t.Fatal(err)
	}
	// Five PCI devices, the platform one, the DMI identity, the CPU.
	if len(aliases) != 8 || slices.Contains(aliases, "pci:not-read-from-here") || slices.Contains(aliases, "never:read") {
		t.Fatalf("modaliases: %q", aliases)
	}
	if got := tab.ModulesFor(aliases, nil); !reflect.DeepEqual(got, []string{"virtio_pci"}) {
		t.Fatalf("pass 1: %v", got)
	}
	// After virtio_pci the virtio devices appear (pass 2), then the SCSI disk of virtio_scsi (pass 3).
	sys["bus/virtio/devices/virtio0/modalias"] = &fstest.MapFile{Data: []byte("virtio:d00000001v00001AF4\n")}
	sys["bus/virtio/devices/virtio1/modalias"] = &fstest.MapFile{Data: []byte("virtio:d00000002v00001AF4\n")}
	sys["bus/virtio/devices/virtio2/modalias"] = &fstest.MapFile{Data: []byte("virtio:d00000004v00001AF4\n")}
	aliases, _ = ReadModaliases(sys)
	loaded := map[string]bool{"virtio_pci": true}
	if got := tab.ModulesFor(aliases, loaded); !reflect.DeepEqual(got, []string{"virtio_blk", "virtio_net", "virtio_rng"}) {
		t.Fatalf("pass 2: %v", got)
	}
	sys["bus/scsi/devices/0:0:0:0/modalias"] = &fstest.MapFile{Data: []byte("scsi:t-0x00\n")}
	aliases, _ = ReadModaliases(sys)
	for _, m := range []string{"virtio_blk", "virtio_net", "virtio_rng"} {
		loaded[m] = true
	}
	if got := tab.ModulesFor(aliases, loaded); !reflect.DeepEqual(got, []string{"sd_mod"}) {
		t.Fatalf("pass 3: %v", got)
	}
}

func TestMatchServerDevices(t *testing.T) {
	tab := fixtureTable(t)
	cases := map[string][]string{
		"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01":           {"ahci"}, // ICH9 AHCI: listed twice, reported once
		"pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02":           {"nvme"}, // Samsung NVMe by class
		"pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00":           {"e1000e"},
		"pci:v00008086d0000100Esv00008086sd00001100bc02sc00i00":           {"e1000"},
		"pci:v000010DEd00001EB8sv000010DEsd000012A2bc03sc02i00":           nil,
		"dmi:bvnLENOVO:bvr1.0:bd04/01/2014:svnLENOVO:pnX:pvrThinkPadT41:": {"thinkpad_fake"}, // '*' crosses '/'
		"dmi:bvnLENOVO:bd04/01/2014:svnLENOVO:pvrThinkPadT40:":            nil,               // [!0]
		"acpi:PNP0A08:":             {"fake-acpi"},
		"acpi:PNP0A05:":             nil,
		"scsi:t-0x05":               nil,
		"virtio:d00000008v00001AF4": {"virtio_scsi"},
	}
	for alias, want := range cases {
		if got := tab.Match(alias); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v, want %v", alias, got, want)
		}
	}
	// Names compare with '-' and '_' alike.
	if got := tab.ModulesFor([]string{"acpi:PNP0A03:"}, map[string]bool{"fake_acpi": true}); len(got) != 0 {
		t.Errorf("skip by normalised name: %v", got)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"", "", true},
		{"*", "", true},
		{"*", "a/b", true},
		{"a*", "a", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"?", "", false},
		{"a?c", "abc", true},
		{"[abc]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[!a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[]]", "]", true},
		{"[a-]", "-", true},
		{"[", "[", true},     // malformed class: literal
		{"a[b", "a[b", true}, // malformed class: literal
		{`\*`, "*", true},
		{`\*`, "x", false},
		{`a\`, `a\`, true},
		{"pci:v*d*sv*sd*bc01sc06i01*", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", true},
		{"pci:v*d*sv*sd*bc01sc06i01*", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i00", false},
	} {
		if got := Glob(c.p, c.s); got != c.ok {
			t.Errorf("Glob(%q, %q) = %v, want %v", c.p, c.s, got, c.ok)
		}
	}
}
