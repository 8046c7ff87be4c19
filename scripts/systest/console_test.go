package systest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/gorilla/websocket"

	"github.com/bmedge/bmedge/coordinator/engine/brokerauth"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestConsole: a node's serial console relayed by its site (the
// simulated console of driver fake, the edge agent behind a WAN link of
// its own): enabled through states/console, an independent WebSocket
// client (python3-websocket) sees the boot log and the login prompt and
// what it types reaches the node (echoed and answered); `coordinator
// node console` in a pty sees the same and leaves on ~.; the WebSocket
// and the log answer 401 without credentials; mosquitto_pub with the
// site's credential and with a ramdisk's cannot publish console input;
// what the console prints while the WAN is cut is in the log once the
// link returns.
func TestConsole(t *testing.T) {
	t.Parallel()
	pub := requireTool(t, "mosquitto_pub")
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import websocket").CombinedOutput(); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("python3-websocket is not installed (%v: %s); run scripts/install-test-deps.sh", err, out)
		}
		t.Skipf("python3-websocket is not installed; run scripts/install-test-deps.sh (make test does)")
	}
	w := newWAN(t, wanVeth)
	users := map[string]string{"op": "console-pw"}
	s := startWANSiteOpts(t, w, testrig.Options{Users: users, Machine: fsm.Config{WaitTimeout: 5 * time.Minute, CommandTimeout: time.Minute, ResendInterval: time.Second}},
		"--simulate", "2", "--no-boot", "--heartbeat", "1s", "--bmc-delay", "50ms", "--resend-interval", "1s")
	id := s.cl.CreateNode("c1", "site1", nil)
	path := "/v1/nodes/" + id + "/states/console"
	if code := s.cl.Do("PUT", path, map[string]any{"enabled": true}, nil); code != 400 {
		t.Fatalf("PUT states/console on a no-console node: %d, want 400", code)
	}
	if code := s.cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/console_interface", "value": "fake"}}, nil); code != 200 {
		t.Fatalf("PATCH console_interface fake: %d", code)
	}
	if code := s.cl.Do("PUT", path, map[string]any{"enabled": true}, nil); code != 202 {
		t.Fatalf("PUT states/console enabled: %d, want 202", code)
	}
	var st struct {
		Enabled bool `json:"console_enabled"`
		Info    struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"console_info"`
	}
	if code := s.cl.Do("GET", path, nil, &st); code != 200 || !st.Enabled || st.Info.Type != "websocket" ||
		st.Info.URL != "ws"+strings.TrimPrefix(s.c.APIURL, "http")+"/v1/nodes/"+id+"/console" {
		t.Fatalf("GET states/console: %d %+v", code, st)
	}
	// Without credentials: 401, on the WebSocket and on the log.
	for _, p := range []string{"/console", "/console/log"} {
		req, _ := http.NewRequest("GET", s.c.APIURL+"/v1/nodes/"+id+p, nil)
		if p == "/console" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("GET %s without credentials: %d, want 401", p, resp.StatusCode)
		}
	}
	// The independent client: boot log, login prompt, a typed line.
	out, err := exec.Command(py, filepath.Join("testdata", "console_ws.py"), st.Info.URL, "op", users["op"]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("python3-websocket client: %v\n%s", err, out)
	}
	logOf := func() string {
		req, _ := http.NewRequest("GET", s.c.APIURL+"/v1/nodes/"+id+"/console/log", nil)
		req.SetBasicAuth("op", users["op"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET console/log: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	if l := logOf(); !strings.Contains(l, "Linux version") || !strings.Contains(l, "typed-through-websocket") {
		t.Fatalf("the console log lacks the boot log or the typed line:\n%s", l)
	}

	// coordinator node console in a pty.
	coord := buildCoordinatorCLI(t)
	cmd := exec.Command(coord, "--url", s.c.APIURL, "node", "console", "c1")
	cmd.Env = append(os.Environ(), "OS_USERNAME=op", "OS_PASSWORD="+users["op"])
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			mu.Lock()
			screen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(s string) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(screen.String(), s), fmt.Sprintf("screen ends %q", tail(screen.String(), 12))
		}
	}
	waitFor(t, time.Minute, "the CLI's banner and the kept boot log", seen("Linux version"))
	waitFor(t, time.Minute, "the CLI's banner", seen("Type ~. at the start of a line to leave"))
	_, _ = f.Write([]byte("echo typed-in-the-cli\r"))
	waitFor(t, time.Minute, "the echo and answer in the CLI", seen("echo typed-in-the-cli\r\ntyped-in-the-cli\r\n"))
	_, _ = f.Write([]byte("~."))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("coordinator node console after ~.: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("coordinator node console did not leave on ~.")
	}
	logOut, err := exec.Command(coord, "--url", s.c.APIURL, "--os-username", "op", "--os-password", users["op"], "node", "console", "c1", "--log").CombinedOutput()
	if err != nil || !strings.Contains(string(logOut), "typed-in-the-cli") {
		t.Fatalf("node console --log: %v\n%s", err, tail(string(logOut), 12))
	}

	// Console input from a site's credential, and from a ramdisk's:
	// refused by the broker.
	rid := s.cl.CreateNode("r1", "site1", nil)
	s.cl.MustVerb(rid, "manage", nil)
	s.cl.WaitState(rid, "manageable", time.Minute)
	s.cl.MustVerb(rid, "inspect", nil)
	s.cl.WaitState(rid, "inspect wait", time.Minute)
	ruser, rpass, ok := s.c.Engine.NodeCredentials(rid)
	if !ok {
		t.Fatal("the inspected node has no boot credential")
	}
	input := fmt.Sprintf(`{"v":1,"kind":"console","id":"forged-input","site":"site1","node":"%s","sent":"%s","action":"input","console":{"input":"%s"}}`,
		id, time.Now().UTC().Format(time.RFC3339), base64.StdEncoding.EncodeToString([]byte("echo forged-input\r")))
	for _, who := range []struct{ what, user, pass, client string }{
		{"the site's credential", s.creds.Username, s.creds.Password, "edge-site1.tool"},
		{"a ramdisk's credential", ruser, rpass, brokerauth.NodeClientID(rid)},
	} {
		out, _ := mosquitto(t, s.c.BrokerURL, pub, who.user, who.pass, who.client, "-t", protocol.ConsoleCmdTopic("site1"), "-m", input, "-q", "1")
		if !strings.Contains(strings.ToLower(out), "not authori") && !refusedAtConnect(out) {
			t.Errorf("console input with %s was not refused: %q", who.what, out)
		}
	}

	// The WAN cut while the console prints.
	ws := dialConsole(t, st.Info.URL, "op", users["op"])
	defer ws.Close()
	const ticks = 60 // one every 0.2 s: 12 s
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(fmt.Sprintf("ticks %d\r", ticks))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the first tick in the log", func() (bool, string) {
		l := logOf()
		return strings.Contains(l, fmt.Sprintf("tick 1 of %d", ticks)), tail(l, 12)
	})
	w.Cut()
	cut := time.Now()
	time.Sleep(20 * time.Second) // the ticks end during the outage
	if l := logOf(); strings.Contains(l, fmt.Sprintf("tick %d of %d", ticks, ticks)) {
		t.Fatalf("the last tick crossed a WAN that was cut")
	}
	if strings.Contains(logOf(), "forged-input") {
		t.Fatal("refused console input reached the node")
	}
	w.Restore()
	t.Logf("WAN cut for %s", time.Since(cut).Round(time.Second))
	waitFor(t, 3*time.Minute, "every tick printed during the outage in the log", func() (bool, string) {
		l := logOf()
		var want []string
		for i := 1; i <= ticks; i++ {
			want = append(want, fmt.Sprintf("tick %d of %d", i, ticks))
		}
		return strings.Contains(l, strings.Join(want, "\r\n")), tail(l, 12)
	})
	if code := s.cl.Do("PUT", path, map[string]any{"enabled": false}, nil); code != 202 {
		t.Fatalf("PUT states/console disabled: %d", code)
	}
	if code := s.cl.Do("GET", path, nil, &st); code != 200 || st.Enabled {
		t.Fatalf("GET states/console after disable: %d %+v", code, st)
	}
}

func dialConsole(t *testing.T, url, user, pass string) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	c, resp, err := websocket.DefaultDialer.Dial(url, h)
	if err != nil {
		if resp != nil {
			t.Fatalf("console WebSocket: %v (%s)", err, resp.Status)
		}
		t.Fatalf("console WebSocket: %v", err)
	}
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	return c
}

// buildCoordinatorCLI builds the coordinator command.
func buildCoordinatorCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "coordinator")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/bmedge/bmedge/coordinator/cmd/coordinator").CombinedOutput()
	if err != nil {
		t.Fatalf("go build coordinator: %v\n%s", err, out)
	}
	return bin
}
