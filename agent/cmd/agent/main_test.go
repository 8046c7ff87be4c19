package main

import (
	"strings"
	"testing"
)

// TestRamdiskFlags: the media server's flags need the ISO; the ramdisks'
// broker and parameters need a way to boot them, virtual media or
// network boot (a network-boot-only agent was refused them).
func TestRamdiskFlags(t *testing.T) {
	for _, c := range []struct {
		iso, listen, url, broker, params string
		netboot                          bool
		want                             string
	}{
		{want: ""},
		{iso: "r.iso", listen: ":8080", broker: "mqtt://10.1.0.1:1883", params: "bm.gw=10.1.0.1", want: ""},
		{broker: "mqtt://10.1.0.1:1883", params: "bm.gw=10.1.0.1", netboot: true, want: ""},
		{params: "bm.gw=10.1.0.1", netboot: true, want: ""},
		{listen: ":8080", netboot: true, want: "--media-listen and --media-url go with --ramdisk-iso"},
		{url: "http://x", want: "--media-listen and --media-url go with --ramdisk-iso"},
		{broker: "mqtt://10.1.0.1:1883", want: "go with --ramdisk-iso (virtual media) or --netboot-interface"},
		{params: "bm.gw=10.1.0.1", want: "go with --ramdisk-iso (virtual media) or --netboot-interface"},
	} {
		got := ramdiskFlagsError(c.iso, c.listen, c.url, c.broker, c.params, c.netboot)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c, got, c.want)
		}
	}
}
