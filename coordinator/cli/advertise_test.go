package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeNeedsAdvertiseOnEveryInterface: an embedded broker on every
// interface without --advertise-broker-url is refused before anything is
// opened (site add would write mqtt://0.0.0.0:PORT into the site's
// credentials file, which no edge agent can reach), naming the flag with
// the scheme and port to give; with the flag, on a specific address or
// with an external broker, it passes.
func TestServeNeedsAdvertiseOnEveryInterface(t *testing.T) {
	for _, c := range []struct{ listen, want string }{
		{"0.0.0.0:1883", "--advertise-broker-url mqtt://HOST:1883"},
		{"[::]:1883", "--advertise-broker-url mqtt://HOST:1883"},
		{":1883", "--advertise-broker-url mqtt://HOST:1883"},
	} {
		// The data folder cannot be made (its parent is a file): were the
		// check gone, serve would stop at the store, before any listener
		// opens on every interface, and this test would fail on the
		// message instead.
		parent := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(parent, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(parent, "data")
		var out, errOut bytes.Buffer
		code := Main([]string{"serve", "--data-dir", data, "--mqtt-insecure", "--mqtt-listen", c.listen}, strings.NewReader(""), &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "site credentials") {
			t.Errorf("serve --mqtt-listen %s without --advertise-broker-url: exit %d, want 1 naming %q; stderr:\n%s", c.listen, code, c.want, errOut.String())
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("serve --mqtt-listen %s: refused, but made the data folder", c.listen)
		}
	}
	o := serveOptions{mqttListen: "0.0.0.0:8883", tlsCert: "server.pem"}
	if err := advertiseCheck(&o); err == nil || !strings.Contains(err.Error(), "mqtts://HOST:8883") {
		t.Errorf("with TLS the refusal should name mqtts://HOST:8883: %v", err)
	}
	for _, o := range []serveOptions{
		{mqttListen: "127.0.0.1:1883"}, {mqttListen: "10.0.0.5:1883"}, {mqttListen: "broker.example.net:1883"},
		{mqttListen: "0.0.0.0:8883", advertise: "mqtts://coord.example.net:8883"},
		{mqttListen: "0.0.0.0:1883", brokerURL: "mqtts://broker.example.net:8883"},
	} {
		if err := advertiseCheck(&o); err != nil {
			t.Errorf("%+v refused: %v", o, err)
		}
	}
}
