package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesPlainMQTTOffLoopback: serve refuses, before it opens
// anything, the embedded broker without TLS on an address that is not
// loopback (every interface, another IP, a host name other than
// localhost), naming the address and the flags that make it right; a
// loopback address, TLS, an external broker or --mqtt-insecure pass.
func TestServeRefusesPlainMQTTOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "10.77.0.1:1883", "broker.example.net:1883"} {
		data := filepath.Join(t.TempDir(), "data")
		var out, errOut bytes.Buffer
		// The API on 0.0.0.0 without authentication is refused too, after
		// the broker's check: without that check serve ends at once on
		// the API's refusal (this test fails) instead of serving.
		code := Main([]string{"serve", "--data-dir", data, "--api-listen", "0.0.0.0:0", "--mqtt-listen", addr}, strings.NewReader(""), &out, &errOut)
		stderr := errOut.String()
		if code != 1 {
			t.Errorf("serve --mqtt-listen %s without TLS: exit %d, want 1; stderr:\n%s", addr, code, stderr)
			continue
		}
		for _, w := range []string{"refusing to serve plain MQTT on " + addr, "--tls-cert FILE --tls-key FILE", "--mqtt-insecure", "in the clear"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("serve --mqtt-listen %s: stderr does not say %q:\n%s", addr, w, stderr)
			}
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("serve --mqtt-listen %s: refused, but made the data folder", addr)
		}
	}
	for _, o := range []serveOptions{
		{mqttListen: "127.0.0.1:1883"}, {mqttListen: "127.0.0.2:1883"}, {mqttListen: "[::1]:1883"}, {mqttListen: "localhost:1883"},
		{mqttListen: "0.0.0.0:8883", tlsCert: "server.pem"},
		{mqttListen: "0.0.0.0:1883", mqttInsecure: true},
		{mqttListen: "0.0.0.0:1883", brokerURL: "mqtts://broker.example.net:8883"},
	} {
		if err := plainMQTTCheck(&o); err != nil {
			t.Errorf("%+v refused: %v", o, err)
		}
	}
	var out, errOut bytes.Buffer
	Main([]string{"serve", "--help"}, strings.NewReader(""), &out, &errOut)
	if help := strings.Join(strings.Fields(out.String()+errOut.String()), " "); !strings.Contains(help, "--mqtt-insecure") || !strings.Contains(help, "in the clear") {
		t.Errorf("serve --help does not teach --mqtt-insecure:\n%s", help)
	}
}
