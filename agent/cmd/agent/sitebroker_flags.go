package main

import (
	"flag"
	"time"

	"github.com/bmedge/bmedge/agent"
)

// siteBrokerFlags declares the flags of agent.SiteBrokerOptions and the
// heartbeat summary interval; the returned function reads them after
// parsing.
func siteBrokerFlags(fs *flag.FlagSet) func() (agent.SiteBrokerOptions, time.Duration) {
	listen := fs.String("site-broker-listen", "", "run the site's MQTT broker for the ramdisks at `ADDR` (host:port on the site network); the ramdisks then never reach the coordinator's broker")
	url := fs.String("site-broker-url", "", "the site broker as the ramdisks reach it (default mqtt://ADDR, mqtts:// with TLS); a URL without a port gets the bound port")
	cert := fs.String("site-broker-tls-cert", "", "certificate (PEM) of the site broker: it then speaks MQTT over TLS only")
	key := fs.String("site-broker-tls-key", "", "private key (PEM) of --site-broker-tls-cert")
	ca := fs.String("site-broker-ca", "", "CA (PEM) that signed --site-broker-tls-cert; its pin goes to the ramdisks (default: --ca-file)")
	summary := fs.Duration("heartbeat-summary", agent.DefaultHeartbeatSummary, "how often the latest heartbeats of the site's ramdisks go to the coordinator, as one message")
	return func() (agent.SiteBrokerOptions, time.Duration) {
		return agent.SiteBrokerOptions{Listen: *listen, URL: *url, TLSCert: *cert, TLSKey: *key, CAFile: *ca}, *summary
	}
}
