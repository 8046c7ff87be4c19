package ramdisk_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// lockedBuffer is a log sink the test can search.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func needTool(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it)", tool)
		}
		t.Skipf("%s is missing; scripts/install-test-deps.sh installs it", tool)
	}
	return p
}

// TestRescueLogin is a rescue an operator can log in to: a QEMU VM
// behind the virtual Redfish BMC is deployed, then rescued with a
// password P through the API; OpenSSH's client (through sshpass, QEMU's
// user network forwarding a loopback port to the guest's port 22) logs
// in as rescue with P and runs commands on the node; a wrong password
// and another user are refused; the API shows the password masked.
// After unrescue (the node power-cycles into its instance) no login
// works. The coordinator's data folder, the coordinator's and the edge
// agent's logs, the VM's console and the site's retained messages never
// hold P.
func TestRescueLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	t.Parallel()
	iso := needISO(t)
	needTool(t, "ssh")
	sshpass := needTool(t, "sshpass")
	vmDir := vmDir(t, "rsvm")
	diskPath := filepath.Join(vmDir, "disk.raw")
	randomFile(t, diskPath, 64<<20, 7)
	if err := os.Truncate(diskPath, 1<<30); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(vmDir, "console.log")
	showConsole(t, console, 4096)

	// The instance image, served on loopback (the guest reaches it as 10.0.2.2).
	img := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(8, 9))
	for i := range img {
		img[i] = byte(rng.Uint32())
	}
	imgURL := serveFile(t, "/raw.img", img)

	// The guest's port 22 is forwarded from a loopback port.
	sshAddr := testrig.FreeAddr(t)
	_, sshPort, _ := net.SplitHostPort(sshAddr)

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs (last 8 KiB):\n%s", tail([]byte(logs.String()), 8192))
		}
	})

	// The coordinator, without automated cleaning (this test is about
	// rescue: one ramdisk boot to deploy, one to rescue), logging at debug
	// level into a buffer the test searches; the site broker and the BMC
	// speak TLS.
	l := newLab(t, labOptions{ISO: iso, SiteTLS: true, NoAutomatedClean: true, Log: log})
	c, cl, creds, data, stop := l.c, l.cl, l.creds, l.dataDir, l.stop
	bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: diskPath, DiskSerial: "DISK0", Console: console,
		Netdev: "user,id=n0,hostfwd=tcp:" + sshAddr + "-:22"})
	id := l.createNode("vm1", "redfish", bmc.driverInfo("s3cret"), map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	l.step(id, "provide", "available", nil, 30*time.Second)
	patch := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": imgURL},
		{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)}}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	l.step(id, "active", "active", nil, 5*time.Minute)

	password := distinctSecret(t)
	login := func(user, pw string, command string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, sshpass, "-p", pw, "ssh", "-F", "/dev/null",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
			"-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1",
			"-o", "ConnectTimeout=15", "-p", sshPort, user+"@127.0.0.1", command).CombinedOutput()
		return string(out), err
	}

	// A rescue_password with another verb is refused, as Ironic does.
	if code, msg := cl.Verb(id, "deleted", map[string]any{"rescue_password": password}); code != 400 || !strings.Contains(msg, "only valid") {
		t.Fatalf("undeploy with a rescue_password: %d %s; want 400", code, msg)
	}
	n := l.step(id, "rescue", "rescue", map[string]any{"rescue_password": password}, 5*time.Minute)
	if n.InstanceInfo["rescue_password"] != "******" || n.InstanceInfo["hashed_rescue_password"] != "******" {
		t.Fatalf("in rescue, instance_info shows %v; want rescue_password and hashed_rescue_password masked", n.InstanceInfo)
	}
	out, err := login("rescue", password, "uname -a; cat /proc/cmdline")
	if err != nil || !strings.Contains(out, "Linux") || !strings.Contains(out, "bm.") && !strings.Contains(out, "console=") {
		t.Fatalf("ssh rescue@ with the rescue password: %v\n%s", err, out)
	}
	t.Logf("logged in: %s", strings.TrimSpace(out))
	for _, c := range []struct{ user, pw string }{{"rescue", password + "x"}, {"root", password}} {
		if out, err := login(c.user, c.pw, "echo logged-in"); err == nil || strings.Contains(out, "logged-in") {
			t.Fatalf("ssh %s@ with a wrong password or user logged in: %q", c.user, out)
		}
	}
	// The node's history names the host key the operator can check.
	historyHasRe(t, cl, `rescue login: ssh rescue@10\.0\.2\.15 \(port 22, host key SHA256:`)

	l.step(id, "unrescue", "active", nil, 2*time.Minute)
	if st := bmc.state(); st.PowerState != "On" || st.BootTarget != vbmc.BootHdd {
		t.Fatalf("after unrescue the BMC shows %+v; want on, booting the disk", st)
	}
	if out, err := login("rescue", password, "echo logged-in"); err == nil || strings.Contains(out, "logged-in") {
		t.Fatalf("ssh rescue@ after unrescue logged in: %q", out)
	}
	n = cl.Get(id)
	if _, ok := n.InstanceInfo["rescue_password"]; ok {
		t.Fatalf("after unrescue instance_info still has rescue_password: %v", n.InstanceInfo)
	}

	// The site's retained messages (as the site sees them on its broker).
	if sub, err := exec.LookPath("mosquitto_sub"); err == nil {
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(c.BrokerURL, "mqtt://"))
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		got, _ := exec.CommandContext(ctx, sub, "-V", "mqttv5", "-h", host, "-p", port, "-u", creds.Username, "-P", creds.Password,
			"-i", "edge-lab.r", "-t", "bm/v1/site/lab/#", "-v", "--retained-only", "-W", "2").CombinedOutput()
		cancel()
		if !strings.Contains(string(got), "presence") || strings.Contains(string(got), password) {
			t.Fatalf("the site's retained messages (want its presence, without the rescue password):\n%s", got)
		}
	} else if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatal("mosquitto_sub is missing (scripts/install-test-deps.sh installs it)")
	}

	stop()
	b, _ := os.ReadFile(console)
	for name, text := range map[string]string{"the logs": logs.String(), "the VM console": string(b)} {
		if strings.Contains(text, password) {
			t.Fatalf("%s hold the rescue password", name)
		}
	}
	files := 0
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the rescue password", path)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("searching the data folder: %v (%d files)", err, files)
	}
}

func distinctSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range b {
		b[i] = "abcdefghijkmnpqrstuvwxyz23456789"[r.IntN(32)]
	}
	return "Rescue-" + string(b)
}
