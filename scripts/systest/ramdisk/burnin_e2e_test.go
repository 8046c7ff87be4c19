package ramdisk_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// curlJSON sends a request with curl (an independent client) and returns
// the status and body.
func curlJSON(t *testing.T, cl *testrig.Client, method, path, body string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("curl is missing")
		}
		t.Skip("curl is missing")
	}
	return curlAt(t, cl, "latest", method, path, body)
}

// stepArgs returns the argsinfo names GET …/cleaning/steps lists for a
// step, and whether the step is listed.
func stepArgs(t *testing.T, body, step string) (map[string]any, bool) {
	t.Helper()
	var resp struct {
		Steps []struct {
			Interface string         `json:"interface"`
			Step      string         `json:"step"`
			Priority  int            `json:"priority"`
			ArgsInfo  map[string]any `json:"argsinfo"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("steps: %v: %s", err, body)
	}
	for _, s := range resp.Steps {
		if s.Interface == "deploy" && s.Step == step {
			return s.ArgsInfo, true
		}
	}
	return nil, false
}

// checkCatalogue: GET …/cleaning/steps lists the burn-in, express erase,
// pstore and verification steps with their argsinfo.
func checkCatalogue(t *testing.T, cl *testrig.Client, node string) {
	t.Helper()
	code, body := curlJSON(t, cl, "GET", "/v1/nodes/"+node+"/cleaning/steps", "")
	if code != 200 {
		t.Fatalf("GET cleaning/steps: %d %s", code, body)
	}
	for step, arg := range map[string]string{
		"burnin_cpu": "agent_burnin_cpu_timeout", "burnin_memory": "agent_burnin_vm_vm-bytes", "burnin_disk": "agent_burnin_fio_disk_runtime",
		"burnin_network": "agent_burnin_fio_network_config", "erase_devices_express": "agent_continue_if_secure_erase_failed",
		"erase_devices": "agent_erase_skip_read_only", "verify_hardware": "memory_tolerance_percent", "erase_pstore": "",
	} {
		args, ok := stepArgs(t, body, step)
		if !ok {
			t.Errorf("GET cleaning/steps does not list deploy.%s: %s", step, body)
			continue
		}
		if _, has := args[arg]; arg != "" && !has {
			t.Errorf("deploy.%s lacks argsinfo %s: %v", step, arg, args)
		}
	}
}

// TestBurninStepsCatalogue (simulated site, no QEMU): the new steps are
// listed with argsinfo; burnin_network without its partner node is
// refused at validation naming the field; an unknown argument is refused naming the known ones;
// driver_info supplies a burn-in argument.
func TestBurninStepsCatalogue(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "s1", agent.SimOptions{Nodes: 2, StepDuration: 50 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	id := cl.CreateNode("b1", "s1", map[string]any{"agent_burnin_cpu_timeout": "1"})
	cl.MustVerb(id, "manage", nil)
	cl.WaitRest(id, 10*time.Second)
	cl.MustVerb(id, "inspect", nil)
	if n := cl.WaitRest(id, 10*time.Second); n.State != "manageable" {
		t.Fatalf("inspect: %s %s", n.State, n.LastError)
	}
	checkCatalogue(t, cl, "b1")

	clean := func(steps string) (int, string) {
		return curlJSON(t, cl, "PUT", "/v1/nodes/b1/states/provision", `{"target": "clean", "clean_steps": `+steps+`}`)
	}
	code, body := clean(`[{"interface": "deploy", "step": "burnin_network", "args": {"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2"}}}]`)
	if code != 400 || !strings.Contains(body, `field \\\"partner_node\\\" is missing`) {
		t.Fatalf("burnin_network: %d %s", code, body)
	}
	// As every bad clean list here: the clean fails before anything runs,
	// naming the argument and the ones the step takes.
	if code, body = clean(`[{"interface": "deploy", "step": "burnin_cpu", "args": {"duration": 5}}]`); code != 202 {
		t.Fatalf("clean: %d %s", code, body)
	}
	if n := cl.WaitRest(id, 10*time.Second); n.State != "clean failed" || !strings.Contains(n.LastError, `unknown argument "duration"; it takes agent_burnin_cpu_cpu, agent_burnin_cpu_timeout`) {
		t.Fatalf("unknown argument: %s %s", n.State, n.LastError)
	}
	cl.MustVerb(id, "manage", nil)
	cl.WaitRest(id, 10*time.Second)
	if code, body = clean(`[{"interface": "deploy", "step": "burnin_cpu"}, {"interface": "deploy", "step": "burnin_memory", "args": {"agent_burnin_vm_timeout": 1}}]`); code != 202 {
		t.Fatalf("burn-in clean: %d %s", code, body)
	}
	if n := cl.WaitRest(id, 10*time.Second); n.State != "manageable" {
		t.Fatalf("burn-in clean: %s %s", n.State, n.LastError)
	}
	if h := nodeHistory(t, cl, "b1"); !strings.Contains(h, "clean step deploy.burnin_cpu done") || !strings.Contains(h, "clean step deploy.burnin_memory done") {
		t.Fatalf("history lacks the burn-in steps:\n%s", h)
	}
}

// nodeHistory is the node's history, one event a line.
func nodeHistory(t *testing.T, cl *testrig.Client, node string) string {
	t.Helper()
	var h struct {
		History []struct {
			Event string `json:"event"`
		} `json:"history"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+node+"/history", nil, &h); code != 200 {
		t.Fatalf("history of %s: %d", node, code)
	}
	var b strings.Builder
	for _, e := range h.History {
		b.WriteString(e.Event + "\n")
	}
	return b.String()
}

// TestQEMUBurnInEraseVerify boots the real ramdisk in QEMU (three boots,
// two of them at once on two VMs):
//   - VM 1 (virtio + NVMe, properties say 4 CPUs): one manual clean runs
//     burnin_cpu, burnin_memory, burnin_network (the reader, paired with
//     VM 2) and burnin_disk for a short time (their figures in the
//     history), erase_devices_express with the metadata fallback (the
//     NVMe disk by Format NVM, read back as zeros on the host), then
//     verify_hardware, which fails naming 4 and 1;
//   - VM 2 (a virtio disk whose reads fail at 32 MiB, QEMU blkdebug):
//     burnin_network (the writer, listening on port 9000, forwarded from
//     the host's loopback, waiting for VM 1) with its figures in the
//     history, then burnin_disk fails naming /dev/vda and the offset;
//   - VM 1 again: express erase without the fallback fails naming
//     /dev/vda and agent_continue_if_secure_erase_failed.
func TestQEMUBurnInEraseVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU three times")
	}
	t.Parallel()
	kernel, initrd := needDirect(t)
	l := newLab(t, labOptions{Kernel: kernel, Initrd: initrd})
	cl := l.cl
	dir := t.TempDir()
	nvmePath := filepath.Join(dir, "nvme.raw")
	randomFile(t, nvmePath, 64<<20, 3)
	bdConf := filepath.Join(dir, "blkdebug.conf")
	// Reads touching sector 65536 (32 MiB) fail with EIO; writes succeed.
	if err := os.WriteFile(bdConf, []byte("[inject-error]\nevent = \"read_aio\"\niotype = \"read\"\nerrno = \"5\"\nsector = \"65536\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// burn2 is the network burn-in's writer: its port 9000 is forwarded
	// from the host's loopback, which burn1 (the reader) reaches at
	// 10.0.2.2 (QEMU user networking).
	_, fwdPort, _ := net.SplitHostPort(testrig.FreeAddr(t))
	vm1, console1 := l.smallVM(dir, "burn1", map[string]any{"qemu_nvme_disk": nvmePath, "qemu_nvme_serial": "NVME0"})
	vm2, console2 := l.smallVM(dir, "burn2", map[string]any{"qemu_disk_blkdebug": bdConf, "qemu_hostfwd": "tcp:127.0.0.1:" + fwdPort + "-:9000"})
	showConsole(t, console1, 3072)
	showConsole(t, console2, 3072)
	if code := cl.Do("PATCH", "/v1/nodes/burn1", []map[string]any{{"op": "add", "path": "/properties/cpus", "value": 4}}, nil); code != 200 {
		t.Fatalf("patch properties: %d", code)
	}
	step := func(name string, args map[string]any) map[string]any {
		if args == nil {
			return map[string]any{"interface": "deploy", "step": name}
		}
		return map[string]any{"interface": "deploy", "step": name, "args": args}
	}
	cl.MustVerb(vm1, "clean", map[string]any{"clean_steps": []map[string]any{
		step("burnin_cpu", map[string]any{"agent_burnin_cpu_timeout": 3}),
		step("burnin_memory", map[string]any{"agent_burnin_vm_timeout": 3, "agent_burnin_vm_vm-bytes": "64M"}),
		step("burnin_network", map[string]any{"agent_burnin_fio_network_runtime": 2, "agent_burnin_fio_network_pairing_timeout": 300,
			"agent_burnin_fio_network_config": map[string]any{"role": "reader", "partner": "10.0.2.2:" + fwdPort, "partner_node": "burn2"}}),
		step("burnin_disk", map[string]any{"agent_burnin_fio_disk_loops": 1}),
		step("erase_devices_express", map[string]any{"agent_continue_if_secure_erase_failed": true}),
		step("verify_hardware", nil),
	}})
	cl.MustVerb(vm2, "clean", map[string]any{"clean_steps": []map[string]any{
		step("burnin_network", map[string]any{"agent_burnin_fio_network_runtime": 2, "agent_burnin_fio_network_pairing_timeout": 300,
			"agent_burnin_fio_network_config": map[string]any{"role": "writer", "partner": "10.0.2.15", "partner_node": vm1}}),
		step("burnin_disk", map[string]any{"agent_burnin_fio_disk_loops": 1})}})

	n1 := cl.WaitRest(vm1, 6*time.Minute)
	if n1.State != "clean failed" || !strings.Contains(n1.LastError, "cpus: node.properties says 4, the node has 1") {
		t.Fatalf("clean of burn1 ended in %q: %s; want clean failed by verify_hardware naming 4 and 1", n1.State, n1.LastError)
	}
	h := nodeHistory(t, cl, "burn1")
	t.Logf("burn1 history:\n%s", h)
	for _, re := range []string{
		`clean step deploy\.burnin_cpu done: 1 workers, [1-9][0-9]* rounds checked in [0-9.]+s \([0-9.]+ rounds/s\), 0 errors`,
		`clean step deploy\.burnin_memory done: 64 MiB tested by 1 workers, [1-9][0-9]* bytes checked in [0-9.]+s \([0-9]+ MB/s\), 0 errors`,
		`clean step deploy\.burnin_network done: reader paired with node ` + vm2 + ` \(10\.0\.2\.2:` + fwdPort + `\): wrote [1-9][0-9]* bytes in [0-9.]+s \([0-9.]+ MB/s\), read [1-9][0-9]* bytes in [0-9.]+s \([0-9.]+ MB/s\), 0 errors`,
		`clean step deploy\.burnin_disk done: .*/dev/nvme0n1 1\.00 passes, 67108864 bytes verified, write [0-9.]+ MB/s, read [0-9.]+ MB/s, 0 I/O errors, 0 mismatches`,
		`clean step deploy\.burnin_disk done: .*/dev/vda 1\.00 passes, 67108864 bytes verified`,
		`clean step deploy\.erase_devices_express done: .*/dev/nvme0n1 nvme-format-(crypto|user-data)-erase in [0-9.]+s, [1-9][0-9]* samples verified`,
		`clean step deploy\.erase_devices_express done: .*/dev/vda metadata-only \(fallback\)`,
	} {
		if !regexp.MustCompile(re).MatchString(h) {
			t.Errorf("burn1's history matches no %q", re)
		}
	}
	if off := firstNonZero(t, nvmePath); off >= 0 {
		t.Fatalf("after the express erase the NVMe disk has a non-zero byte at %d", off)
	}
	// The real ramdisk's steps, as cached, carry the standard argsinfo.
	checkCatalogue(t, cl, "burn1")

	n2 := cl.WaitRest(vm2, 6*time.Minute)
	if n2.State != "clean failed" || !strings.Contains(n2.LastError, "disk burn-in failed: /dev/vda: read of 1048576 bytes at offset 33554432 failed") || !strings.Contains(n2.LastError, "input/output error") {
		t.Fatalf("clean of burn2 ended in %q: %s; want clean failed naming /dev/vda and an I/O error", n2.State, n2.LastError)
	}
	t.Logf("burn2: %s", n2.LastError)
	h2 := nodeHistory(t, cl, "burn2")
	if re := `clean step deploy\.burnin_network done: writer paired with node ` + vm1 + ` \(10\.0\.2\.15:9000\): wrote [1-9][0-9]* bytes in [0-9.]+s \([0-9.]+ MB/s\), read [1-9][0-9]* bytes in [0-9.]+s \([0-9.]+ MB/s\), 0 errors`; !regexp.MustCompile(re).MatchString(h2) {
		t.Errorf("burn2's history matches no %q:\n%s", re, h2)
	}

	// Express erase without the fallback: the virtio disk has no
	// hardware erase.
	cl.Do("DELETE", "/v1/nodes/burn1/maintenance", nil, nil)
	cl.MustVerb(vm1, "manage", nil)
	if n := cl.WaitRest(vm1, time.Minute); n.State != "manageable" {
		t.Fatalf("manage after clean failed: %s %s", n.State, n.LastError)
	}
	cl.MustVerb(vm1, "clean", map[string]any{"clean_steps": []map[string]any{step("erase_devices_express", nil)}})
	n1 = cl.WaitRest(vm1, 6*time.Minute)
	if n1.State != "clean failed" || !strings.Contains(n1.LastError, "/dev/vda (") || !strings.Contains(n1.LastError, "agent_continue_if_secure_erase_failed=true") || !strings.Contains(n1.LastError, "nothing was erased") {
		t.Fatalf("express erase without fallback ended in %q: %s", n1.State, n1.LastError)
	}
	t.Logf("express without fallback: %s", n1.LastError)
}
