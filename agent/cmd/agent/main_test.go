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

// TestPlainSiteBrokerRefused (issue 30, point 6): a site broker without
// TLS on an address that is not loopback is refused at flag validation,
// naming --site-broker-insecure; loopback, TLS or the flag pass. Nothing
// listens: the check runs before the broker is started.
func TestPlainSiteBrokerRefused(t *testing.T) {
	for _, c := range []struct {
		listen, cert string
		insecure     bool
		want         string
	}{
		{want: ""},
		{listen: "127.0.0.1:1883", want: ""},
		{listen: "127.0.0.9:1883", want: ""},
		{listen: "[::1]:1883", want: ""},
		{listen: "localhost:1883", want: ""},
		{listen: "0.0.0.0:1883", want: "--site-broker-insecure"},
		{listen: ":1883", want: "--site-broker-insecure"},
		{listen: "10.1.0.1:1883", want: "refusing to serve the site broker in plain MQTT on 10.1.0.1:1883"},
		{listen: "[2001:db8::1]:1883", want: "--site-broker-tls-cert"},
		{listen: "10.1.0.1:8883", cert: "site.crt", want: ""},
		{listen: "0.0.0.0:1883", insecure: true, want: ""},
		{insecure: true, want: "--site-broker-insecure goes with --site-broker-listen"},
	} {
		got := plainSiteBrokerError(c.listen, c.cert, c.insecure)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c, got, c.want)
		}
	}
}
