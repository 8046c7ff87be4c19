package ramdisk_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// needDirect returns the ramdisk as the qemu-dev driver boots it directly:
// the uncompressed kernel (vmlinux, its PVH entry; a bzImage spends ~5
// CPU-seconds under TCG decompressing itself) and the initramfs.
func needDirect(t *testing.T) (kernel, initrd string) {
	t.Helper()
	_, initrd = need(t)
	kernel = filepath.Join(filepath.Dir(initrd), "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("the ramdisk has no vmlinux (run make ramdisk): %v", err)
	}
	return kernel, initrd
}

// need returns the built ramdisk (Debian's signed bzImage, as network
// boot, ISOs and deploy_kernel take it), or skips (fails under make test).
func need(t *testing.T) (kernel, initrd string) {
	t.Helper()
	dir, _ := filepath.Abs("../../../build/ramdisk")
	kernel, initrd = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.zst")
	_, err1 := os.Stat(kernel)
	_, err2 := os.Stat(initrd)
	_, err3 := exec.LookPath("qemu-system-x86_64")
	if err1 != nil || err2 != nil || err3 != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("the ramdisk or QEMU is missing (run make ramdisk): %v %v %v", err1, err2, err3)
		}
		t.Skip("the ramdisk or QEMU is missing; run make ramdisk (make test does)")
	}
	return kernel, initrd
}

func randomFile(t *testing.T, path string, size int64, seed uint64) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	buf := make([]byte, 4<<20)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var first []byte
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := 0; i < len(buf); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8; j++ {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = append([]byte(nil), buf...)
		}
	}
	return first
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestQEMURamdisk boots the real ramdisk in QEMU against the real
// coordinator: inspect, provide (both disks, virtio and NVMe, then read
// all zeroes; the NVMe one by Format NVM), deploy a raw image, undeploy, a
// wrong checksum, rebuild with a zstd image, rebuild with a compressed
// qcow2 image made by qemu-img (the disk's range compared by sha256).
func TestQEMURamdisk(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU several times")
	}
	t.Parallel()
	kernel, initrd := needDirect(t)
	dir := t.TempDir()
	diskPath := filepath.Join(dir, "disk.raw")
	const diskSize = 1 << 30
	randomFile(t, diskPath, diskSize, 1)
	// A second disk behind QEMU's emulated NVMe controller: erase_devices
	// must erase it too, with a method it supports.
	nvmePath := filepath.Join(dir, "nvme.raw")
	randomFile(t, nvmePath, 256<<20, 2)

	// Images, served on loopback; the guest reaches it as 10.0.2.2.
	img := make([]byte, 48<<20)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < len(img); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			img[i+j] = byte(v >> (8 * j))
		}
	}
	var zst bytes.Buffer
	zw, _ := zstd.NewWriter(&zst)
	zw.Write(img[:32<<20])
	zw.Close()
	files := map[string][]byte{"/raw.img": img, "/img.zst": zst.Bytes()}
	// A qcow2 image made by qemu-img from a raw image of random data,
	// compressible data and holes: compressed, plain and unallocated
	// clusters. Served with Range requests, as the site cache serves a
	// cached image.
	qraw, qcow := qcowImage(t, dir)
	if qcow != nil {
		files["/img.qcow2"] = qcow
	}
	var qcowRanges atomic.Int32
	port := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if strings.HasSuffix(r.URL.Path, ".qcow2") {
			if r.Header.Get("Range") != "" {
				qcowRanges.Add(1)
			}
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
			return
		}
		w.Write(b)
	})
	imgURL := func(p string) string { return "http://10.0.2.2:" + port + p }

	// This lab runs MQTT over TLS: the edge agent trusts the lab CA's
	// file, the ramdisk only the CA's pin on its kernel command line.
	l := newLab(t, labOptions{Kernel: kernel, Initrd: initrd, CoordinatorTLS: true, SiteTLS: true})
	cl := l.cl
	console := filepath.Join(dir, "console.log")
	showConsole(t, console, 4096)
	var n testrig.Node
	// The root device hint picks the 1 GiB disk (by default, as in Ironic,
	// only disks of 4 GiB and more are root disk candidates).
	id := l.createNode("vm1", "qemu-dev", map[string]any{"qemu_disk": diskPath, "qemu_disk_serial": "DISK0", "qemu_console": console, "qemu_memory_mb": 1024,
		"qemu_nvme_disk": nvmePath, "qemu_nvme_serial": "NVME0"}, map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	n = l.step(id, "inspect", "manageable", nil, 3*time.Minute)
	mem, _ := n.Properties["memory_mb"].(float64)
	if n.Properties["cpus"] != 1.0 || n.Properties["local_gb"] != 1.0 || mem < 900 || mem > 1100 {
		t.Fatalf("properties do not match the VM (1 CPU, 1024 MiB, 1 GiB disk): %v", n.Properties)
	}
	// The ramdisk reached the broker over TLS, trusting the CA by pin.
	consoleHas(t, console, "connected to mqtts://10.0.2.2:")
	consoleHas(t, console, "bm.ca=sha256/")
	var inv struct {
		Inventory map[string]any `json:"inventory"`
	}
	cl.Do("GET", "/v1/nodes/vm1/inventory", nil, &inv)
	if !strings.Contains(jsonString(inv.Inventory), "DISK0") {
		t.Fatalf("inventory lacks the disk serial DISK0: %s", jsonString(inv.Inventory))
	}

	l.step(id, "provide", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("after cleaning the disk has a non-zero byte at %d", off)
	}
	if off := firstNonZero(t, nvmePath); off >= 0 {
		t.Fatalf("after cleaning the NVMe disk has a non-zero byte at %d", off)
	}
	// QEMU's NVMe controller supports Format NVM with a user-data erase
	// and reads deallocated blocks as zeroes: the hardware method wins.
	historyHasRe(t, cl, `clean step deploy\.erase_devices done: .*/dev/nvme0n1 nvme-format-(crypto|user-data)-erase, 268435456 bytes in [0-9.]+s, [1-9][0-9]* samples verified`)
	t.Logf("erase: %s", regexp.MustCompile(`clean step deploy\.erase_devices done: [^\n]*`).FindString(history(t, cl)))
	// So far the ramdisk took its address from QEMU's DHCP server; the
	// console holds the last boot's log.
	consoleHas(t, console, "DHCP lease 10.0.2.15/24 gateway 10.0.2.2")
	// The history says what each erase step did to which disk.
	historyHasRe(t, cl, `clean step deploy\.erase_devices_metadata done: .*/dev/vda [1-9][0-9]* regions zeroed`)
	historyHasRe(t, cl, `clean step deploy\.erase_devices done: .*/dev/vda (blkzeroout|blkdiscard|blksecdiscard|overwrite-zeros), 1073741824 bytes in [0-9.]+s, [1-9][0-9]* samples verified`)
	// The node's broker password is on the kernel command line; the
	// console (a BMC's serial log, in real life) must not show it.
	b, _ := os.ReadFile(console)
	if m := regexp.MustCompile(`bm\.password=[^<\s]`).FindIndex(b); m != nil {
		t.Fatalf("the VM console shows the broker password: %q", b[max(0, m[0]-200):m[1]])
	}
	if !bytes.Contains(b, []byte("bm.password=<redacted>")) {
		t.Fatalf("the agent's start-up line with its redacted parameters is not on the console:\n%s", tail(b, 2048))
	}

	// From now on a static address from the kernel command line.
	l.patch(id, map[string]any{"op": "add", "path": "/instance_info/image_source", "value": imgURL("/raw.img")},
		map[string]any{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)},
		map[string]any{"op": "add", "path": "/driver_info/qemu_cmdline", "value": "bm.ip=10.0.2.15/24 bm.gw=10.0.2.2"})
	l.step(id, "active", "active", nil, 5*time.Minute)
	historyHas(t, cl, "deploy step deploy.write_image done: "+itoa(len(img))+" bytes (none, "+itoa(len(img))+" downloaded) written to /dev/vda")
	if !bytes.Equal(readHead(t, diskPath, len(img)), img) {
		t.Fatal("the disk does not hold the raw image after deploy")
	}
	l.step(id, "deleted", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("after undeploy's cleaning the disk has a non-zero byte at %d", off)
	}

	// A wrong checksum fails the deploy, naming the checksum given but
	// never the digest of what was received (an oracle of the content
	// of whatever the URL names).
	wrong := strings.Repeat("0", 64)
	l.patch(id, map[string]any{"op": "add", "path": "/instance_info/image_source", "value": imgURL("/img.zst")},
		map[string]any{"op": "add", "path": "/instance_info/image_checksum", "value": wrong})
	n = l.step(id, "active", "deploy failed", nil, 5*time.Minute)
	if !strings.Contains(n.LastError, "checksum mismatch") || !strings.Contains(n.LastError, "is not the "+wrong+" given") || strings.Contains(n.LastError, sha(zst.Bytes())) {
		t.Fatalf("last_error does not name the checksum given, or names the digest received: %s", n.LastError)
	}
	// The failed deploy left the ramdisk's log on the console (a good
	// deploy ends in the instance's boot, which starts a new console).
	consoleHas(t, console, "static 10.0.2.15/24 gateway 10.0.2.2")
	l.patch(id, map[string]any{"op": "add", "path": "/instance_info/image_checksum", "value": sha(zst.Bytes())})
	l.step(id, "rebuild", "active", nil, 5*time.Minute)
	if !bytes.Equal(readHead(t, diskPath, 32<<20), img[:32<<20]) {
		t.Fatal("the disk does not hold the decompressed zstd image after rebuild")
	}

	// A qcow2 image: the disk's first virtual-size bytes read as the raw
	// image it was made from, its holes zeroed over the zstd image.
	if qcow == nil {
		return
	}
	l.patch(id, map[string]any{"op": "add", "path": "/instance_info/image_source", "value": imgURL("/img.qcow2")},
		map[string]any{"op": "add", "path": "/instance_info/image_checksum", "value": sha(qcow)},
		map[string]any{"op": "add", "path": "/instance_info/image_disk_format", "value": "qcow2"})
	l.step(id, "rebuild", "active", nil, 5*time.Minute)
	historyHas(t, cl, "deploy step deploy.write_image done: "+itoa(len(qraw))+" bytes (qcow2, "+itoa(len(qcow))+" downloaded) written to /dev/vda")
	if got := sha(readHead(t, diskPath, len(qraw))); got != sha(qraw) {
		t.Fatalf("the disk's first %d bytes have sha256 %s, the raw image %s", len(qraw), got, sha(qraw))
	}
	if qcowRanges.Load() == 0 {
		t.Fatal("the ramdisk read the qcow2 image's tables without Range requests")
	}
}

// qcowImage makes a 40 MiB raw image (per MiB: random data, zeros, or
// compressible text) and its qcow2 made by 'qemu-img convert -O qcow2
// -c'. Without qemu-img it returns nil (the test fails under
// BM_REQUIRE_ALL=1).
func qcowImage(t *testing.T, dir string) (raw, qcow []byte) {
	t.Helper()
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("qemu-img is missing (Debian package qemu-utils): %v", err)
		}
		t.Log("qemu-img is missing: no qcow2 deploy (install Debian's qemu-utils)")
		return nil, nil
	}
	raw = make([]byte, 40<<20)
	rng := rand.New(rand.NewPCG(9, 10))
	text := bytes.Repeat([]byte("a qcow2 image deployed by the bmedge ramdisk\n"), 1<<15)
	for i := 0; i < len(raw); i += 1 << 20 {
		switch (i >> 20) % 3 {
		case 0:
			for j := i; j < i+1<<20; j += 8 {
				binary.LittleEndian.PutUint64(raw[j:], rng.Uint64())
			}
		case 2:
			copy(raw[i:i+1<<20], text)
		}
	}
	rawPath, qcowPath := filepath.Join(dir, "q.raw"), filepath.Join(dir, "q.qcow2")
	if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuImg, "convert", "-c", "-f", "raw", "-O", "qcow2", rawPath, qcowPath).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	qcow, err = os.ReadFile(qcowPath)
	if err != nil {
		t.Fatal(err)
	}
	return raw, qcow
}

// TestQEMURamdiskCrashOnly: the real ramdisk, given a kernel command line
// it cannot use, logs the fatal error and reboots, and the VM comes back
// into a fresh agent (which fails the same way: the loop a node with a
// bad boot configuration shows on its console). The coordinator is not
// fooled: the node stays in inspect wait until the operator aborts.
func TestQEMURamdiskCrashOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	t.Parallel()
	kernel, initrd := needDirect(t)
	dir := t.TempDir()
	l := newLab(t, labOptions{Kernel: kernel, Initrd: initrd})
	cl := l.cl
	id, console := l.smallVM(dir, "vm2", map[string]any{"qemu_cmdline": "bm.ip=not-an-address"})
	cl.MustVerb(id, "inspect", nil)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(console)
		// Two boots of u-root, each ending in the agent's fatal error.
		if bytes.Count(b, []byte("Welcome to u-root")) >= 2 && bytes.Count(b, []byte("bmramdisk: FATAL: ")) >= 2 {
			if !bytes.Contains(b, []byte(`bm.ip="not-an-address"`)) || !bytes.Contains(b, []byte("rebooting in 5s")) {
				t.Fatalf("the console does not show the fatal error naming bm.ip and the reboot:\n%s", tail(b, 3000))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ramdisk did not come back after its fatal error; console:\n%s", tail(b, 3000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	var got testrig.Node
	cl.Do("GET", "/v1/nodes/"+id, nil, &got)
	if got.State != "inspect wait" {
		t.Fatalf("while the ramdisk cannot start the node is %q, want inspect wait", got.State)
	}
	cl.MustVerb(id, "abort", nil)
	if got = cl.WaitRest(id, 30*time.Second); got.State != "inspect failed" || !strings.Contains(got.LastError, "abort") {
		t.Fatalf("after abort: %q %q", got.State, got.LastError)
	}
}

// TestQEMURamdiskResetMidOperation: the VM is reset (as a crash or a
// watchdog would) after its ramdisk was welcomed; the new boot's hello
// gets no token and the inspection fails at once, naming both boots,
// instead of waiting for its timeout.
func TestQEMURamdiskResetMidOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	t.Parallel()
	kernel, initrd := needDirect(t)
	dir := t.TempDir()
	l := newLab(t, labOptions{Kernel: kernel, Initrd: initrd})
	cl := l.cl
	qmp := filepath.Join(dir, "qmp.sock")
	id, console := l.smallVM(dir, "vm1", map[string]any{"qemu_qmp": qmp})
	cl.MustVerb(id, "inspect", nil)
	// Maintenance, set once the VM runs (inspect wait), holds the node
	// there after its ramdisk is welcomed, so that the reset surely comes
	// mid-operation. The ramdisk takes seconds to boot; the poll is quick.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var cur testrig.Node
		cl.Do("GET", "/v1/nodes/vm1", nil, &cur)
		if cur.State == "inspect wait" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never reached inspect wait: %q %q", cur.State, cur.LastError)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := cl.Do("PUT", "/v1/nodes/vm1/maintenance", map[string]string{"reason": "hold for the test"}, nil); code != 202 {
		t.Fatalf("maintenance: %d", code)
	}
	deadline = time.Now().Add(5 * time.Minute)
	for !strings.Contains(history(t, cl), "ramdisk booted") {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(console)
			t.Fatalf("the ramdisk never said hello; console:\n%s", tail(b, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	qmpReset(t, qmp)
	deadline = time.Now().Add(5 * time.Minute)
	var got testrig.Node
	for {
		cl.Do("GET", "/v1/nodes/vm1", nil, &got)
		if got.State == "inspect failed" {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(console)
			t.Fatalf("after the reset the node is still %q; console:\n%s", got.State, tail(b, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(got.LastError, "restarted on its own") || strings.Count(got.LastError, "boot ") < 2 {
		t.Fatalf("last_error %q does not say the ramdisk restarted, naming both boots", got.LastError)
	}
}

// qmpReset resets the VM through QEMU's machine protocol.
func qmpReset(t *testing.T, sock string) {
	t.Helper()
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatalf("QMP: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	dec := json.NewDecoder(conn)
	var greeting map[string]any
	if err := dec.Decode(&greeting); err != nil {
		t.Fatalf("QMP greeting: %v", err)
	}
	for _, cmd := range []string{"qmp_capabilities", "system_reset"} {
		if _, err := fmt.Fprintf(conn, `{"execute": %q}`+"\n", cmd); err != nil {
			t.Fatalf("QMP %s: %v", cmd, err)
		}
		for {
			var r map[string]any
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("QMP %s: %v", cmd, err)
			}
			if r["error"] != nil {
				t.Fatalf("QMP %s: %v", cmd, r["error"])
			}
			if _, ok := r["return"]; ok {
				break
			}
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// history is the history of node vm1, one event a line.
func history(t *testing.T, cl *testrig.Client) string {
	t.Helper()
	return nodeHistory(t, cl, "vm1")
}

func historyHas(t *testing.T, cl *testrig.Client, want string) {
	t.Helper()
	if h := history(t, cl); !strings.Contains(h, want) {
		t.Fatalf("the node's history lacks %q:\n%s", want, h)
	}
}

func historyHasRe(t *testing.T, cl *testrig.Client, re string) {
	t.Helper()
	if h := history(t, cl); !regexp.MustCompile(re).MatchString(h) {
		t.Fatalf("the node's history matches no %q:\n%s", re, h)
	}
}

func consoleHas(t *testing.T, console, want string) {
	t.Helper()
	b, err := os.ReadFile(console)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(want)) {
		t.Fatalf("the VM console does not say %q; its end:\n%s", want, tail(b, 2048))
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func readHead(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// firstNonZero returns the offset of the first non-zero byte, or -1.
func firstNonZero(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	var off int64
	for {
		n, err := f.Read(buf)
		for i := 0; i < n; i++ {
			if buf[i] != 0 {
				return off + int64(i)
			}
		}
		off += int64(n)
		if err == io.EOF {
			return -1
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
