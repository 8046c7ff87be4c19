package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/lib/freeport"
)

// api is a tiny JSON client of the coordinator.
type api struct{ base string }

func (a api) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func (a api) must(ctx context.Context, method, path string, body, out any, want int) error {
	code, err := a.do(ctx, method, path, body, out)
	if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("%s %s: status %d, want %d", method, path, code, want)
	}
	return nil
}

type node struct {
	UUID        string `json:"uuid"`
	State       string `json:"provision_state"`
	Target      string `json:"target_provision_state"`
	Reservation string `json:"reservation"`
	LastError   string `json:"last_error"`
	Maintenance bool   `json:"maintenance"`
	Internal    struct {
		LastHeartbeat time.Time `json:"agent_last_heartbeat"`
	} `json:"driver_internal_info"`
}

func (a api) waitRest(ctx context.Context, id string, timeout time.Duration) (node, error) {
	deadline := time.Now().Add(timeout)
	for {
		var n node
		if err := a.must(ctx, "GET", "/v1/nodes/"+id, nil, &n, 200); err != nil {
			return n, err
		}
		// At rest: unlocked in a stable state (a failed state keeps its target).
		if n.Reservation == "" && (n.Target == "" || !(strings.HasSuffix(n.State, "ing") || strings.Contains(n.State, "wait"))) {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("node still in %q → %q after %s (last_error %q)", n.State, n.Target, timeout, n.LastError)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return n, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func freeAddr() (string, error) {
	return freeport.Addr("127.0.0.1")
}

// bootTiming is one boot, in host wall-clock times.
type bootTiming struct {
	verb, qemu, hello, heartbeat time.Time
	console                      map[string]float64 // guest uptime of agent milestones
	accel                        string             // TCG or KVM
}

func bootBench(ctx context.Context, cfg config, tmp, kernel, initrd string, cleanups *[]func()) ([]row, error) {
	fmt.Printf("== boot → hello → first heartbeat (real ramdisk %s + %s under QEMU, real coordinator and edge agent, qemu-dev driver)\n",
		filepath.Join(cfg.ramdiskDir, filepath.Base(kernel)), filepath.Base(initrd))
	logPath := filepath.Join(tmp, "coordinator-agent.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, func() { lf.Close() })
	var lw io.Writer = lf
	if cfg.keepLogs {
		lw = io.MultiWriter(lf, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tailLog := func() {
		b, _ := os.ReadFile(logPath)
		if len(b) > 0 {
			fmt.Fprintf(os.Stderr, "coordinator and agent warnings (last 3 KiB):\n%s\n", tail(b, 3072))
		}
	}

	mqtt, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c, err := server.Start(context.Background(), server.Options{DataDir: filepath.Join(tmp, "coordinator"), APIListen: "127.0.0.1:0", MQTTListen: mqtt,
		Machine:      fsm.Config{WaitTimeout: 5 * time.Minute, CommandTimeout: time.Minute, ResendInterval: 2 * time.Second, AutomatedClean: true},
		TickInterval: 100 * time.Millisecond, Log: log})
	if err != nil {
		return nil, fmt.Errorf("start the coordinator: %w", err)
	}
	*cleanups = append(*cleanups, c.Close)
	cl := api{base: "http://" + c.APIAddr}

	var creds agent.Credentials
	if err := cl.must(ctx, "POST", "/v1/sites", map[string]string{"name": "bench"}, &creds, 201); err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(mqtt)
	guestNet, netDesc := "bm.ip=10.0.2.15/24 bm.gw=10.0.2.2", "static guest address (bm.ip=10.0.2.15/24)"
	if cfg.dhcp {
		guestNet, netDesc = "", "guest address by DHCP"
	}
	a := agent.New(agent.Config{QEMU: agent.QEMUOptions{Kernel: kernel, Initrd: initrd, BrokerURL: "mqtt://10.0.2.2:" + port,
		Cmdline: guestNet},
		Site: creds.Site, BrokerURL: creds.BrokerURL, Username: creds.Username, Password: creds.Password, ResendInterval: time.Second, Log: log})
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan struct{})
	go func() {
		defer close(adone)
		if err := a.Run(actx); err != nil {
			log.Error("edge agent stopped", "err", err)
		}
	}()
	// Stopping the agent powers its VMs off (kills QEMU).
	*cleanups = append(*cleanups, func() {
		acancel()
		select {
		case <-adone:
		case <-time.After(10 * time.Second):
			fmt.Fprintln(os.Stderr, "bench-ramdisk: the edge agent did not stop within 10 s")
		}
		killQEMUChildren()
	})
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	err = a.AwaitUp(wctx)
	wcancel()
	if err != nil {
		tailLog()
		return nil, fmt.Errorf("the edge agent did not connect: %w", err)
	}

	diskPath := filepath.Join(tmp, "vm-disk.raw")
	if err := os.WriteFile(diskPath, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(diskPath, 1<<30); err != nil {
		return nil, err
	}
	console := filepath.Join(tmp, "console.log")
	var n node
	body := map[string]any{"name": "vm1", "driver": "qemu-dev", "conductor_group": "bench",
		"driver_info": map[string]any{"qemu_disk": diskPath, "qemu_disk_serial": "DISK0", "qemu_console": console, "qemu_memory_mb": 1024}}
	if err := cl.must(ctx, "POST", "/v1/nodes", body, &n, 201); err != nil {
		return nil, err
	}
	id := n.UUID
	if err := cl.must(ctx, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"}, nil, 202); err != nil {
		return nil, err
	}
	if n, err = cl.waitRest(ctx, id, time.Minute); err != nil || n.State != "manageable" {
		tailLog()
		return nil, fmt.Errorf("manage: state %q, last_error %q, %v", n.State, n.LastError, err)
	}
	fmt.Printf("  each boot: inspect verb → the agent starts QEMU (1 vCPU, 1024 MiB, TCG: no -accel) with the ramdisk by direct kernel boot,\n")
	fmt.Printf("  %s, broker at 10.0.2.2 (host loopback); the node is put in maintenance once\n", netDesc)
	fmt.Printf("  QEMU runs, so that the coordinator holds the ramdisk up until its first heartbeat, then released and inspection finishes.\n")
	fmt.Printf("  hello and heartbeat times are the coordinator's (history entry, agent_last_heartbeat); QEMU start from /proc/PID/stat;\n")
	fmt.Printf("  guest uptimes from the agent's console lines (the kernel starts some seconds after QEMU: firmware, kernel and initramfs load).\n")

	var hellos, hbs, starts []time.Duration
	for i := range cfg.boots {
		bt, err := oneBoot(ctx, cl, id, console)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			tailLog()
			if b, rerr := os.ReadFile(console); rerr == nil {
				fmt.Fprintf(os.Stderr, "VM console (last 3 KiB):\n%s\n", tail(b, 3072))
			}
			return nil, fmt.Errorf("boot %d: %w", i+1, err)
		}
		h, hb, st := bt.hello.Sub(bt.qemu), bt.heartbeat.Sub(bt.qemu), bt.qemu.Sub(bt.verb)
		hellos, hbs, starts = append(hellos, h), append(hbs, hb), append(starts, st)
		if bt.accel == "KVM" {
			return nil, fmt.Errorf("boot %d: QEMU opened /dev/kvm; this measurement is for TCG", i+1)
		}
		fmt.Printf("  boot %d (%s): verb → QEMU start %s; QEMU start → hello %s, → first heartbeat %s (hello → heartbeat %s)%s\n",
			i+1, bt.accel, startDelay(st), secs(h), secs(hb), secs(bt.heartbeat.Sub(bt.hello)), consoleSummary(bt.console))
	}
	mh, mhb := median(hellos), median(hbs)
	fmt.Printf("  median of %d: QEMU start → hello %s (each: %s), → first heartbeat %s (each: %s); verb → QEMU start %s\n\n",
		len(hbs), secs(mh), durations(hellos), secs(mhb), durations(hbs), startDelay(median(starts)))
	rows := []row{
		{fmt.Sprintf("boot → hello, QEMU TCG (median of %d)", len(hellos)), secs(mh), "-", "-"},
		{fmt.Sprintf("boot → first heartbeat, QEMU TCG (median of %d)", len(hbs)), secs(mhb) + " (" + durations(hbs) + ")", "≤ 10 s", metOrMissed(mhb <= targetHeartbeat)},
	}
	if cfg.fastTrackReps > 0 {
		r, err := fastTrackBench(ctx, cl, id, cfg.fastTrackReps, cleanups)
		if err != nil {
			tailLog()
			if b, rerr := os.ReadFile(console); rerr == nil {
				fmt.Fprintf(os.Stderr, "VM console (last 3 KiB):\n%s\n", tail(b, 3072))
			}
			return rows, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// startDelay prints the verb → QEMU start delay, which is below the
// 10 ms resolution of the process start time when the agent is quick.
func startDelay(d time.Duration) string {
	if d < 10*time.Millisecond {
		return "< 10 ms (the resolution of /proc start times)"
	}
	return fmtMs(d)
}

// oneBoot inspects the node once and times the boot of its ramdisk.
func oneBoot(ctx context.Context, cl api, id, console string) (bootTiming, error) {
	var bt bootTiming
	_ = os.Remove(console)
	bt.verb = time.Now()
	if err := cl.must(ctx, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "inspect"}, nil, 202); err != nil {
		return bt, err
	}
	var qemuPID int
	maint := false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if qemuPID == 0 {
			qemuPID, bt.qemu = findQEMUChild(bt.verb)
		}
		var n node
		if err := cl.must(ctx, "GET", "/v1/nodes/"+id, nil, &n, 200); err != nil {
			return bt, err
		}
		if !maint && n.State == "inspect wait" {
			if err := cl.must(ctx, "PUT", "/v1/nodes/"+id+"/maintenance", map[string]string{"reason": "bench-ramdisk: hold the ramdisk until its first heartbeat"}, nil, 202); err != nil {
				return bt, err
			}
			maint = true
		}
		if n.State != "inspecting" && n.State != "inspect wait" {
			return bt, fmt.Errorf("inspection ended in %q before the first heartbeat (last_error %q)", n.State, n.LastError)
		}
		if hb := n.Internal.LastHeartbeat; hb.After(bt.verb) {
			if bt.hello.IsZero() {
				var err error
				if bt.hello, err = helloTime(ctx, cl, id, bt.verb); err != nil {
					return bt, err
				}
			}
			if hb.After(bt.hello) {
				bt.heartbeat = hb
				break
			}
		}
		if time.Now().After(deadline) {
			return bt, fmt.Errorf("no heartbeat within 3 minutes of the inspect verb (state %q, QEMU pid %d)", n.State, qemuPID)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return bt, err
		}
	}
	if qemuPID == 0 {
		return bt, fmt.Errorf("the ramdisk answered but no QEMU child process was seen")
	}
	// QEMU is up and running the guest: whether it holds /dev/kvm now
	// says which accelerator it chose.
	bt.accel = accelerator(qemuPID)
	if !maint {
		return bt, fmt.Errorf("the node never showed inspect wait before the heartbeat")
	}
	if err := cl.must(ctx, "DELETE", "/v1/nodes/"+id+"/maintenance", nil, nil, 202); err != nil {
		return bt, err
	}
	n, err := cl.waitRest(ctx, id, 3*time.Minute)
	if err != nil {
		return bt, fmt.Errorf("inspection after the heartbeat: %w", err)
	}
	if n.State != "manageable" {
		return bt, fmt.Errorf("inspection ended in %q, not manageable: %s", n.State, n.LastError)
	}
	// The inspection powers the VM off; wait until QEMU is gone.
	for range 100 {
		if !alive(qemuPID) {
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return bt, err
		}
	}
	bt.console = parseConsole(console)
	return bt, nil
}

// accelerator tells TCG from KVM by whether QEMU holds /dev/kvm open
// (it keeps it open while it runs a guest with KVM).
func accelerator(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil || len(fds) < 3 {
		return ""
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && l == "/dev/kvm" {
			return "KVM"
		}
	}
	return "TCG"
}

// helloTime is the coordinator's time of the hello: the history entry it
// wrote when the ramdisk booted (after since).
func helloTime(ctx context.Context, cl api, id string, since time.Time) (time.Time, error) {
	var h struct {
		History []struct {
			Time  time.Time `json:"created_at"`
			Event string    `json:"event"`
		} `json:"history"`
	}
	if err := cl.must(ctx, "GET", "/v1/nodes/"+id+"/history", nil, &h, 200); err != nil {
		return time.Time{}, err
	}
	for i := len(h.History) - 1; i >= 0; i-- {
		e := h.History[i]
		if strings.HasPrefix(e.Event, "ramdisk booted") && e.Time.After(since) {
			return e.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("agent_last_heartbeat changed but the history has no hello")
}

// findQEMUChild looks for a qemu-system child of this process started
// after since and returns its pid and start time. The start time comes
// from /proc/PID/stat (clock ticks since boot, 10 ms resolution).
func findQEMUChild(since time.Time) (int, time.Time) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, time.Time{}
	}
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		comm := s[open+1 : close]
		f := strings.Fields(s[close+1:])
		if len(f) < 20 || !strings.HasPrefix(comm, "qemu-system") {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ticks, _ := strconv.ParseInt(f[19], 10, 64)
		if ppid != me {
			continue
		}
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			continue
		}
		now := time.Now()
		start := now.Add(-(time.Duration(ts.Nano()) - time.Duration(ticks)*10*time.Millisecond))
		if start.Before(since.Add(-20 * time.Millisecond)) {
			continue // an older VM on its way out
		}
		return pid, start
	}
	return 0, time.Time{}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// killQEMUChildren kills VMs this process started that are still running
// (the edge agent normally does it when it stops).
func killQEMUChildren() {
	for range 10 {
		pid, _ := findQEMUChild(time.Time{})
		if pid == 0 {
			return
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(100 * time.Millisecond)
	}
}

var consoleLine = regexp.MustCompile(`\[\s*([0-9.]+)\] bmramdisk: (starting|modules:|ready|connected to)`)

// parseConsole returns the guest uptime (s) at which the agent started,
// loaded modules, had its network and connected to the broker.
func parseConsole(p string) map[string]float64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	for _, x := range consoleLine.FindAllStringSubmatch(string(b), -1) {
		if _, seen := m[x[2]]; !seen {
			m[x[2]], _ = strconv.ParseFloat(x[1], 64)
		}
	}
	return m
}

func consoleSummary(m map[string]float64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range []struct{ key, name string }{{"starting", "agent started"}, {"modules:", "modules loaded"}, {"ready", "network up"}, {"connected to", "broker connected"}} {
		if v, ok := m[k.key]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k.name, v))
		}
	}
	return "; guest uptime (s): " + strings.Join(parts, ", ")
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
