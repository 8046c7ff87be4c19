package ramdisk_test

import (
	"bytes"
	"compress/gzip"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// curlAt is curl at an API version: the independent client of the RAID
// API checks.
func curlAt(t *testing.T, cl *testrig.Client, version, method, path, body string) (int, string) {
	t.Helper()
	args := []string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Content-Type: application/json",
		"-H", "X-OpenStack-Ironic-API-Version: " + version, cl.Base + path}
	if body != "" {
		args = append(args, "--data", body)
	}
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, path, err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	code := 0
	_ = json.Unmarshal([]byte(s[i+1:]), &code)
	return code, s[:max(i, 0)]
}

// gptParts reads the (start, size) in bytes of the used GPT entries of
// a disk image, nil when it has no GPT.
func gptParts(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 34*512)
	if _, err := io.ReadFull(f, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf[512:520]) != "EFI PART" {
		return nil
	}
	var out [][2]int64
	for i := 0; i < 128; i++ {
		e := buf[1024+i*128:]
		first, last := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if first == 0 {
			continue
		}
		out = append(out, [2]int64{int64(first * 512), int64((last - first + 1) * 512)})
	}
	return out
}

// examine runs the host's mdadm --examine on the first 4 MiB of the
// region [off, off+4 MiB) of a disk image (copied to a file: mdadm reads
// regular files) and returns its output and whether it found a superblock.
func examine(t *testing.T, disk string, off int64) (string, bool) {
	t.Helper()
	src, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	part := filepath.Join(t.TempDir(), "member")
	dst, err := os.Create(part)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, off, 4<<20)); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	out, err := exec.Command("mdadm", "--examine", part).CombinedOutput()
	return string(out), err == nil
}

// TestQEMUSoftwareRAID: a QEMU node with two disks (virtio and NVMe) gets
// a target_raid_config (RAID-1 root, RAID-0 data) through PUT
// .../states/raid; provide's automated cleaning runs
// raid.delete_configuration, the erase steps and raid.create_configuration;
// the host's mdadm finds the md superblocks on both disk files and
// raid_config shows the arrays. The deploy writes the image to the root
// array: both mirrors hold it after the members' data offset. After the
// undeploy a manual raid.delete_configuration leaves no superblock and no
// partition table; raid.apply_configuration then builds the RAID-1 its
// argument gives. The API refusals are checked with curl.
func TestQEMUSoftwareRAID(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU five times")
	}
	t.Parallel()
	kernel, _ := need(t) // the instance image's kernel, which its GRUB boots
	direct, initrd := needDirect(t)
	for _, tool := range []string{"mdadm", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it)", tool)
			}
			t.Skipf("%s is missing (Debian package %s)", tool, tool)
		}
	}
	tools := raidBootTools(t)
	// Automated cleaning runs the software RAID steps as Ironic's
	// operators set them up ([deploy] delete_configuration_priority and
	// create_configuration_priority): raid.delete_configuration before the
	// erase steps, raid.create_configuration after them, so that the node
	// is deployed onto its arrays.
	l := newLab(t, labOptions{Kernel: direct, Initrd: initrd,
		PriorityOverrides: map[string]int{"raid.delete_configuration": 100, "raid.create_configuration": 5}})
	cl := l.cl
	dir := t.TempDir()
	// The image to deploy onto the root array: a whole-disk image that
	// boots once the boot loader is on the disks, served gzip-compressed
	// on loopback (the guest reaches it as 10.0.2.2).
	var mb [8]byte
	_, _ = crand.Read(mb[:])
	marker := "BMEDGE-RAID-INSTANCE-BOOTED-" + hex.EncodeToString(mb[:])
	t0 := time.Now()
	raw := bootableImage(t, dir, kernel, marker, tools)
	img := gz(t, raw)
	t.Logf("bootable image: %d bytes, %d gzip-compressed, made in %.1fs", len(raw), len(img), time.Since(t0).Seconds())
	imgURL := serveFile(t, "/root.img", img)
	disks := []string{filepath.Join(dir, "raid1.raw"), filepath.Join(dir, "nvme.raw")}
	for _, d := range disks {
		if err := os.WriteFile(d, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(d, 1536<<20); err != nil { // sparse
			t.Fatal(err)
		}
	}
	info := map[string]any{"qemu_disk": disks[0], "qemu_nvme_disk": disks[1], "qemu_nvme_serial": "NVME0",
		"qemu_console": filepath.Join(dir, "console.log"), "qemu_memory_mb": 512}
	id := l.createNode("raid1", "qemu-dev", info, nil)
	showConsole(t, filepath.Join(dir, "console.log"), 4096)
	l.step(id, "manage", "manageable", nil, 30*time.Second)

	target := `{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "is_root_volume": true, "volume_name": "root"},` +
		` {"size_gb": "MAX", "raid_level": "0", "controller": "software", "volume_name": "data"}]}`
	// Refusals, as Ironic: below 1.12, RAID 5 for software, schema errors.
	if code, body := curlAt(t, cl, "1.11", "PUT", "/v1/nodes/raid1/states/raid", target); code != 406 {
		t.Errorf("PUT states/raid at 1.11: %d %s; want 406", code, body)
	}
	for bad, want := range map[string]string{
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": "MAX", "raid_level": "5", "controller": "software"}]}`: "RAID 5 and 6 are not offered",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1"}], "x": 1}`:                                                                                    "Additional properties are not allowed",
		`{"logical_disks": [{"raid_level": "1"}]}`:                                                                                                          "'size_gb' is a required property",
		`{"logical_disks": [{"size_gb": "big", "raid_level": "1"}]}`:                                                                                        "size_gb",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "0", "controller": "software"}]}`:                                                                  "RAID-1 for the first logical disk",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "is_root_volume": true}, {"size_gb": 1, "raid_level": "1", "is_root_volume": true}]}`:         "more than one root volume",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "disk_type": "ssd"}]}`:                                              "disk_type is not supported for software RAID",
	} {
		if code, body := curlAt(t, cl, "1.12", "PUT", "/v1/nodes/raid1/states/raid", bad); code != 400 || !strings.Contains(body, want) {
			t.Errorf("PUT states/raid %s: %d %s; want 400 with %q", bad, code, body, want)
		}
	}
	if code, body := curlAt(t, cl, "1.12", "PUT", "/v1/nodes/raid1/states/raid", target); code != 204 {
		t.Fatalf("PUT states/raid: %d %s", code, body)
	}
	code, body := curlAt(t, cl, "1.12", "GET", "/v1/nodes/raid1?fields=target_raid_config,raid_config", "")
	if code != 200 || !strings.Contains(body, `"volume_name":"data"`) || !strings.Contains(body, `"raid_config":{}`) {
		t.Fatalf("node after PUT: %d %s", code, body)
	}
	if code, body := curlAt(t, cl, "1.11", "GET", "/v1/nodes/raid1?fields=target_raid_config", ""); code != 406 {
		t.Errorf("target_raid_config at 1.11: %d %s; want 406", code, body)
	}

	verb := func(v, want string, extra map[string]any) testrig.Node {
		t.Helper()
		return l.step(id, v, want, extra, 15*time.Minute)
	}
	// Automated cleaning, with the priorities Ironic's operators give
	// the RAID steps: delete, erase, create.
	verb("provide", "available", nil)
	historyRe(t, cl, "raid1", `(?s)raid\.delete_configuration done.*deploy\.erase_devices_metadata done.*deploy\.erase_devices done.*raid\.create_configuration done`)
	var node struct {
		RaidConfig struct {
			LogicalDisks []map[string]any `json:"logical_disks"`
			LastUpdated  string           `json:"last_updated"`
		} `json:"raid_config"`
		Properties map[string]any `json:"properties"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &node); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	lds := node.RaidConfig.LogicalDisks
	if len(lds) != 2 || lds[0]["device"] != "/dev/md0" || lds[0]["volume_name"] != "root" || lds[1]["device"] != "/dev/md1" || node.RaidConfig.LastUpdated == "" {
		t.Fatalf("raid_config after create: %+v", node.RaidConfig)
	}
	t.Logf("raid_config: %+v", node.RaidConfig)
	if node.Properties["local_gb"] != float64(1) {
		t.Errorf("properties/local_gb after create: %v; want 1 (the root volume's size)", node.Properties["local_gb"])
	}
	historyRe(t, cl, "raid1", `raid\.create_configuration done: /dev/md0 \(root, RAID-1, [0-9]+ bytes\) on /dev/nvme0n1p1 /dev/vda1; /dev/md1 \(data, RAID-0, [0-9]+ bytes\) on /dev/nvme0n1p2 /dev/vda2; `+
		`BIOS boot partitions \(for the boot loader write_image installs on each holder\) /dev/nvme0n1p3 /dev/vda3`)

	// The host's mdadm reads both disk files: each has two members, of
	// the arrays root (RAID-1) and data (RAID-0), and IPA's BIOS boot
	// partition (2 MiB at 1 MiB, before them on the disk).
	for _, d := range disks {
		parts := gptParts(t, d)
		if len(parts) != 3 || parts[2] != [2]int64{1 << 20, 2 << 20} {
			t.Fatalf("%s: GPT partitions %v, want 3, the third the BIOS boot partition at 1 MiB", d, parts)
		}
		for i, want := range []string{"Raid Level : raid1", "Raid Level : raid0"} {
			out, ok := examine(t, d, parts[i][0])
			if !ok || !strings.Contains(out, want) || !strings.Contains(out, "Version : 1.2") || !strings.Contains(out, "Raid Devices : 2") {
				t.Errorf("mdadm --examine of %s partition %d: %v\n%s", filepath.Base(d), i+1, ok, out)
			}
		}
	}

	// Deploy: write_image finds the root array (assembled anew in this
	// boot) and writes the image to it; both mirrors hold it.
	if code := cl.Do("PATCH", "/v1/nodes/raid1", []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": imgURL},
		{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)}}, nil); code != 200 {
		t.Fatalf("patch instance_info: %d", code)
	}
	verb("active", "active", nil)
	historyRe(t, cl, "raid1", `deploy step deploy\.write_image done: `+itoa(len(raw))+` bytes \(gzip, `+itoa(len(img))+` downloaded\) written to /dev/md[0-9]+.*; `+
		`boot loader installed on /dev/nvme0n1 /dev/vda \(/usr/sbin/grub-install --target=i386-pc from the image's /dev/md[0-9]+p1, /boot/grub/grub.cfg written\)`)
	// The node boots the instance from its disks (qemu-dev: SeaBIOS,
	// both disks): GRUB on a holder, the md root, the kernel and the
	// instance's init, which prints the marker and powers off.
	t0 = time.Now()
	if !waitConsole(t, filepath.Join(dir, "console.log"), marker, 5*time.Minute) {
		t.Fatalf("the deployed node did not boot the instance from its RAID-1 root (no %s on its console)", marker)
	}
	t.Logf("instance boot from both disks: marker after %.1fs", time.Since(t0).Seconds())
	// Each holder alone (a degraded RAID-1) boots too: the boot loader is
	// on every holder disk. Copy-on-write boots, side by side.
	t0 = time.Now()
	alone := map[string][]string{
		"vda":     {"-drive", "if=none,id=d0,file=" + disks[0] + ",format=raw,snapshot=on,file.locking=off", "-device", "virtio-blk-pci,drive=d0"},
		"nvme0n1": {"-drive", "if=none,id=d1,file=" + disks[1] + ",format=raw,snapshot=on,file.locking=off", "-device", "nvme,drive=d1,serial=NVME0"},
	}
	consoles := map[string]chan string{}
	for name, devArgs := range alone {
		ch := make(chan string, 1)
		consoles[name] = ch
		go func() { ch <- bootDisk(t, filepath.Join(dir, "alone-"+name+".log"), devArgs...) }()
	}
	for name, ch := range consoles {
		if out := <-ch; !strings.Contains(out, marker) {
			t.Errorf("booting from %s alone (degraded RAID-1) did not reach the instance; console:\n%s", name, tail([]byte(out), 3000))
		}
	}
	t.Logf("degraded boots from each disk alone, side by side: %.1fs", time.Since(t0).Seconds())
	for _, d := range disks {
		part := gptParts(t, d)[0][0]
		out, _ := examine(t, d, part)
		m := regexp.MustCompile(`Data Offset : ([0-9]+) sectors`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("mdadm --examine of %s after deploy shows no data offset:\n%s", filepath.Base(d), out)
		}
		off, _ := strconv.ParseInt(m[1], 10, 64)
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		// The image's label and the room before its partition; its file
		// system has the boot loader's files since.
		got := make([]byte, 1<<20)
		_, err = f.ReadAt(got, part+off*512)
		f.Close()
		if err != nil || !bytes.Equal(got, raw[:1<<20]) {
			t.Errorf("%s does not hold the image in its root array member (data offset %d sectors): %v", filepath.Base(d), off, err)
		}
		// GRUB's boot code in the disk's MBR, its core image in the BIOS
		// boot partition.
		head := readHead(t, d, 3<<20)
		if !bytes.Contains(head[:440], []byte("GRUB")) || bytes.Count(head[1<<20:], []byte{0}) == 2<<20 {
			t.Errorf("%s: no GRUB boot code in the MBR or no core image in the BIOS boot partition", filepath.Base(d))
		}
	}
	verb("deleted", "available", nil)
	verb("manage", "manageable", nil)
	verb("clean", "manageable", map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": "delete_configuration"}}})
	var after struct {
		RaidConfig map[string]any `json:"raid_config"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &after); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	if after.RaidConfig == nil || len(after.RaidConfig) != 0 {
		t.Errorf("raid_config after delete: %v; want {}", after.RaidConfig)
	}
	historyRe(t, cl, "raid1", `raid\.delete_configuration done: /dev/md[0-9]+ stopped; /dev/md[0-9]+ stopped; superblocks zeroed on (/dev/(nvme0n1p|vda)[12] ?){4}; partition tables zeroed on /dev/nvme0n1 /dev/vda\n`)
	for _, d := range disks {
		if p := gptParts(t, d); p != nil {
			t.Errorf("%s still has a GPT after delete: %v", d, p)
		}
		if head := readHead(t, d, 3<<20); bytes.Count(head, []byte{0}) != len(head) {
			t.Errorf("%s: the boot loader (MBR boot code, BIOS boot partition) is still there after delete", filepath.Base(d))
		}
		for _, off := range []int64{0, 8 << 20, (8 << 20) + (1 << 30)} {
			if out, ok := examine(t, d, off); ok || !strings.Contains(out, "No md superblock detected") {
				t.Errorf("mdadm --examine of %s at %d MiB after delete: found %v\n%s", filepath.Base(d), off>>20, ok, out)
			}
		}
	}

	// raid.apply_configuration: the configuration as its argument; a
	// clean without it fails before anything runs, naming the argument.
	if code, body := curlAt(t, cl, "latest", "PUT", "/v1/nodes/raid1/states/provision",
		`{"target": "clean", "clean_steps": [{"interface": "raid", "step": "apply_configuration", "args": {"delete_existing": false}}]}`); code != 202 {
		t.Fatalf("clean with apply_configuration without raid_config: %d %s", code, body)
	}
	if got := cl.WaitRest(id, time.Minute); got.State != "clean failed" || !strings.Contains(got.LastError, `required argument "raid_config" is missing`) {
		t.Errorf("apply_configuration without raid_config ended in %q: %s; want clean failed naming raid_config", got.State, got.LastError)
	}
	verb("manage", "manageable", nil)
	verb("clean", "manageable", map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": "apply_configuration",
		"args": map[string]any{"raid_config": map[string]any{"logical_disks": []map[string]any{
			{"size_gb": "MAX", "raid_level": "1", "controller": "software", "is_root_volume": true}}}}}}})
	var applied struct {
		RaidConfig struct {
			LogicalDisks []map[string]any `json:"logical_disks"`
		} `json:"raid_config"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &applied); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	if lds := applied.RaidConfig.LogicalDisks; len(lds) != 1 || lds[0]["device"] != "/dev/md0" || lds[0]["size_gb"] != "MAX" {
		t.Errorf("raid_config after apply_configuration: %+v", applied.RaidConfig)
	}
	for _, d := range disks {
		parts := gptParts(t, d)
		if len(parts) != 2 || parts[0][0] != 8<<20 || parts[1] != [2]int64{1 << 20, 2 << 20} {
			t.Fatalf("%s after apply_configuration: partitions %v, want one at 8 MiB and the BIOS boot partition", filepath.Base(d), parts)
		}
		if out, ok := examine(t, d, parts[0][0]); !ok || !strings.Contains(out, "Raid Level : raid1") {
			t.Errorf("mdadm --examine of %s after apply_configuration: %v\n%s", filepath.Base(d), ok, out)
		}
	}
}

func historyRe(t *testing.T, cl *testrig.Client, node, re string) {
	t.Helper()
	h := nodeHistory(t, cl, node)
	if !regexp.MustCompile(re).MatchString(h) {
		t.Errorf("history of %s matches no %q:\n%s", node, re, h)
	}
}

// raidBootTools are the host's GRUB for BIOS and the tools the bootable
// test image is made of; a missing one skips (fails with BM_REQUIRE_ALL=1).
func raidBootTools(t *testing.T) map[string]string {
	t.Helper()
	path := "/usr/sbin:/usr/bin:/sbin:/bin:" + os.Getenv("PATH")
	tools := map[string]string{}
	var missing []string
	for _, tool := range []string{"grub-install", "grub-mkconfig", "grub-probe", "grub-script-check", "grub-mkrelpath", "grub-editenv", "mdadm", "busybox", "mke2fs", "go"} {
		found := ""
		for _, dir := range filepath.SplitList(path) {
			if st, err := os.Stat(filepath.Join(dir, tool)); err == nil && !st.IsDir() {
				found = filepath.Join(dir, tool)
				break
			}
		}
		if found == "" {
			missing = append(missing, tool)
		}
		tools[tool] = found
	}
	if st, err := os.Stat("/usr/lib/grub/i386-pc"); err != nil || !st.IsDir() {
		missing = append(missing, "/usr/lib/grub/i386-pc")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("the bootable RAID test image needs %s (Debian packages grub-pc-bin, grub2-common, mdadm, busybox, e2fsprogs; scripts/install-test-deps.sh installs them)", strings.Join(missing, ", "))
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return tools
}

// bootableImage makes a whole-disk image that boots without root to
// build it: an msdos label with one ext4 partition (mke2fs -d) holding
// the host's grub-install, grub-mkconfig and GRUB for BIOS, busybox (the
// shell and tools grub-mkconfig runs), mdadm, their libraries and the
// loader; an /etc/grub.d script that makes the boot entry; the ramdisk
// tests' kernel and an initramfs whose /init (a static Go program built
// here) prints marker on the console and powers off. The image carries
// no boot loader: write_image's install puts it on the disks.
func bootableImage(t *testing.T, dir, kernel, marker string, tools map[string]string) []byte {
	t.Helper()
	stage := filepath.Join(dir, "stage")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc/grub.d", "boot", "dev", "proc", "sys", "run", "tmp", "root"} {
		must(os.MkdirAll(filepath.Join(stage, d), 0o755))
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} { // merged /usr, as Debian
		must(os.Symlink("usr/"+l, filepath.Join(stage, l)))
	}
	copyFile := func(src, dst string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(src)
		must(err)
		must(os.MkdirAll(filepath.Dir(dst), 0o755))
		must(os.WriteFile(dst, b, mode))
	}
	libs := map[string]bool{}
	for tool, src := range tools {
		if tool == "mke2fs" || tool == "go" {
			continue
		}
		dst := filepath.Join(stage, "usr/bin", tool)
		if strings.Contains(src, "sbin") {
			dst = filepath.Join(stage, "usr/sbin", tool)
		}
		copyFile(src, dst, 0o755)
		if out, err := exec.Command("ldd", src).Output(); err == nil {
			for _, m := range regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
				libs[m[1]] = true
			}
		}
	}
	for lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		must(err)
		dst := lib
		if !strings.HasPrefix(dst, "/usr/") {
			dst = "/usr" + dst
		}
		copyFile(real, filepath.Join(stage, dst), 0o755)
	}
	// busybox's applets, where the image has no program of the name.
	out, err := exec.Command(tools["busybox"], "--list").Output()
	must(err)
	for _, a := range strings.Fields(string(out)) {
		if _, err := os.Lstat(filepath.Join(stage, "usr/bin", a)); err == nil {
			continue
		}
		if _, err := os.Lstat(filepath.Join(stage, "usr/sbin", a)); err == nil {
			continue
		}
		must(os.Symlink("busybox", filepath.Join(stage, "usr/bin", a)))
	}
	for _, d := range []string{"/usr/lib/grub/i386-pc", "/usr/share/grub"} {
		must(filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			copyFile(p, filepath.Join(stage, p), 0o644)
			return nil
		}))
	}
	// The boot entry, made by grub-mkconfig from the image's grub.d.
	must(os.WriteFile(filepath.Join(stage, "etc/grub.d/10_bmedge_test"), []byte("#!/bin/sh\ncat <<'EOF'\nset timeout=0\n"+
		"menuentry 'bmedge software RAID boot test' {\n\tlinux /boot/vmlinuz console=ttyS0 panic=1 loglevel=4\n\tinitrd /boot/initrd\n}\nEOF\n"), 0o755))
	copyFile(kernel, filepath.Join(stage, "boot/vmlinuz"), 0o644)
	// The instance's /init: the marker on the console, then power off.
	src := filepath.Join(dir, "init-src")
	must(os.MkdirAll(src, 0o755))
	must(os.WriteFile(filepath.Join(src, "main.go"), []byte(`package main

import (
	"os"
	"syscall"
)

func main() {
	os.Mkdir("/dev", 0o755)
	syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		f.WriteString("\n`+marker+`\n")
		f.Sync()
	}
	syscall.Sync()
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
}
`), 0o644))
	build := exec.Command(tools["go"], "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "init"), "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test image's init: %v\n%s", err, out)
	}
	initBin, err := os.ReadFile(filepath.Join(dir, "init"))
	must(err)
	must(os.WriteFile(filepath.Join(stage, "boot/initrd"), newcCpio("init", initBin), 0o644))
	// The ext4 partition and the msdos label around it.
	const fsBytes = 64 << 20
	fs := filepath.Join(dir, "root.ext4")
	if out, err := exec.Command(tools["mke2fs"], "-q", "-F", "-t", "ext4", "-L", "bmroot", "-E", "root_owner=0:0", "-d", stage, fs, strconv.Itoa(fsBytes>>10)+"k").CombinedOutput(); err != nil {
		t.Fatalf("mke2fs -d: %v\n%s", err, out)
	}
	fsb, err := os.ReadFile(fs)
	must(err)
	img := make([]byte, 1<<20+len(fsb))
	copy(img[1<<20:], fsb)
	binary.LittleEndian.PutUint32(img[440:], 0x626d6564) // disk signature
	e := img[446:]
	e[4] = 0x83 // Linux
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], uint32(len(fsb)/512))
	img[510], img[511] = 0x55, 0xAA
	must(os.RemoveAll(stage))
	return img
}

// newcCpio is a cpio archive (newc, as the kernel unpacks an initramfs)
// of one executable file.
func newcCpio(name string, data []byte) []byte {
	var b bytes.Buffer
	pad := func() {
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
	}
	entry := func(ino int, mode uint32, name string, data []byte) {
		fmt.Fprintf(&b, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x", ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		b.WriteString(name)
		b.WriteByte(0)
		pad()
		b.Write(data)
		pad()
	}
	entry(1, 0o100755, name, data)
	entry(0, 0, "TRAILER!!!", nil)
	return b.Bytes()
}

// bootDisk boots a QEMU from disks (SeaBIOS, -boot c, no kernel on the
// command line; copy-on-write: the files are not changed) and returns
// its console once the guest powered off, or fails after a timeout.
func bootDisk(t *testing.T, console string, devices ...string) string {
	t.Helper()
	args := vmSpec{MemoryMB: 256, Console: console, Args: append([]string{"-nic", "none", "-boot", "c"}, devices...)}.qemuArgs(t)
	// The instance powers off once it printed its marker: the bound only
	// ends a boot that hangs (two such boots side by side took 90 s at
	// load 12 under TCG).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(console)
	if err != nil {
		t.Errorf("qemu %s: %v\n%s", strings.Join(devices, " "), err, out)
	}
	return string(b)
}

// waitConsole waits for want in a console file.
func waitConsole(t *testing.T, console, want string, d time.Duration) bool {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if b, _ := os.ReadFile(console); strings.Contains(string(b), want) {
			return true
		}
	}
	return false
}

// gz is b gzip-compressed (the image is served compressed: most of it is
// free space).
func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
