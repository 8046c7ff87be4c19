package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// siteBrokerFlags declares the flags of agent.SiteBrokerOptions and the
// heartbeat summary interval; the returned function reads them after
// parsing, with what is wrong with them ("" when nothing).
func siteBrokerFlags(fs *flag.FlagSet) func() (agent.SiteBrokerOptions, time.Duration, string) {
	listen := fs.String("site-broker-listen", "", "run the site's MQTT broker for the ramdisks at `ADDR` (host:port on the site network); the ramdisks then never reach the coordinator's broker")
	url := fs.String("site-broker-url", "", "the site broker as the ramdisks reach it (default mqtt://ADDR, mqtts:// with TLS); a URL without a port gets the bound port")
	cert := fs.String("site-broker-tls-cert", "", "certificate (PEM) of the site broker: it then speaks MQTT over TLS only")
	key := fs.String("site-broker-tls-key", "", "private key (PEM) of --site-broker-tls-cert")
	ca := fs.String("site-broker-ca", "", "CA (PEM) that signed --site-broker-tls-cert; its pin goes to the ramdisks (default: --ca-file)")
	insecure := fs.Bool("site-broker-insecure", false, "serve the site broker in plain MQTT, without --site-broker-tls-cert, on a --site-broker-listen that is not loopback: "+
		"the ramdisks' credentials and everything they send (inventories, step results) then cross the site network in the clear; for a lab network nobody else can reach")
	summary := fs.Duration("heartbeat-summary", agent.DefaultHeartbeatSummary, "how often the latest heartbeats of the site's ramdisks go to the coordinator, as one message")
	return func() (agent.SiteBrokerOptions, time.Duration, string) {
		return agent.SiteBrokerOptions{Listen: *listen, URL: *url, TLSCert: *cert, TLSKey: *key, CAFile: *ca}, *summary,
			plainSiteBrokerError(*listen, *cert, *insecure)
	}
}

// plainSiteBrokerError refuses, before anything is opened, a site broker
// without TLS on an address that is not loopback, unless the operator
// says --site-broker-insecure (as the coordinator refuses a plain
// --mqtt-listen without --mqtt-insecure): the ramdisks' credentials
// cross it. It returns "" when the flags are fine.
func plainSiteBrokerError(listen, cert string, insecure bool) string {
	if listen == "" {
		if insecure {
			return "--site-broker-insecure goes with --site-broker-listen ADDR"
		}
		return ""
	}
	if cert != "" || insecure || netbudget.LoopbackAddr(listen) {
		return ""
	}
	return fmt.Sprintf("refusing to serve the site broker in plain MQTT on %s: the ramdisks' credentials and what they send would cross the site network in the clear. "+
		"Add --site-broker-tls-cert FILE --site-broker-tls-key FILE (the broker then speaks mqtts), or listen on loopback (--site-broker-listen 127.0.0.1:1883), "+
		"or, on a lab network nobody else can reach, say --site-broker-insecure", listen)
}
