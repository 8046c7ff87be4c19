package image

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/lib/roothints"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// fuzzDevices are the disks of TestSelectRoot: every kind SelectRoot must
// tell apart (sizes around the 4 GiB floor, rotational, read-only,
// virtual media, with and without identity strings).
var fuzzDevices = []disk.Device{
	{Name: "nvme0n1", Path: "/dev/nvme0n1", SizeBytes: 400 * gib, Serial: "NV-1", WWN: "eui.0025388b71b0e3a1", Model: "Samsung SSD 980"},
	{Name: "sda", Path: "/dev/sda", SizeBytes: 1000 * gib, Rotational: true, Serial: "WD-0001", WWN: "0x5000c500a1b2c3d4", Model: "WDC WD1002F9YZ", Vendor: "ATA"},
	{Name: "sdb", Path: "/dev/sdb", SizeBytes: 120*gib + 512, Serial: "S-SMALL", Model: "INTEL SSDSC2BB12", Vendor: "ATA"},
	{Name: "sdc", Path: "/dev/sdc", SizeBytes: 2 * gib, Removable: true, Model: "USB Stick"},
	{Name: "sr0", Path: "/dev/sr0", SizeBytes: 1 * gib, VirtualMedia: true},
	{Name: "sdd", Path: "/dev/sdd", SizeBytes: 50 * gib, ReadOnly: true, Serial: "RO-1"},
}

// FuzzRootDeviceHints feeds arbitrary root_device JSON (node properties,
// passed to the ramdisk in a step's args) to RootDeviceHints.UnmarshalJSON
// and the result to SelectRoot, which picks the disk the image overwrites.
// Hints that decode must validate and survive a JSON round trip; the
// chosen disk must be one of the devices, never read-only or virtual
// media, and must match every hint.
func FuzzRootDeviceHints(f *testing.F) {
	for _, s := range []string{
		`{"size": 100}`, `{"size": ">= 50", "rotational": false}`, `{"serial": "ABC", "rotational": "true"}`,
		`{"hctl": "1:0:0:0"}`, `{"rotational": "maybe"}`, `{"size": -3}`, `[1]`, `null`,
		`{"size": "<or> 5 <or> 1000"}`, `{"name": "sdb"}`, `{"name": "/dev/nvme0n1"}`, `{"wwn": "0x5000C500A1B2C3D4"}`,
		`{"model": "<in> intel"}`, `{"vendor": "s== ATA", "rotational": 0}`, `{"serial": "<or> nope <or> NV-1"}`,
		`{"model": "<foo> x"}`, `{"size": "!= 400", "name": "s>= /dev/sdb"}`, `{"size": 1e2}`, `{"size": "9223372036854775807"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h RootDeviceHints
		if err := json.Unmarshal(b, &h); err != nil {
			if !h.IsZero() {
				t.Fatalf("failed decode left hints %s", h)
			}
			return
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("decoded hints %s do not validate: %v", h, err)
		}
		enc, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var h2 RootDeviceHints
		if err := json.Unmarshal(enc, &h2); err != nil || h2.String() != h.String() {
			t.Fatalf("hints %s -> %s -> %s, %v", h, enc, h2, err)
		}
		d, err := SelectRoot(fuzzDevices, h)
		if err != nil {
			return
		}
		found := false
		for _, x := range fuzzDevices {
			found = found || x.Name == d.Name
		}
		if !found || d.Protected() != "" {
			t.Fatalf("hints %s chose %+v", h, d)
		}
		if why, err := roothints.Reject(rootDisk(d), h); why != "" || err != nil {
			t.Fatalf("hints %s chose %s, which they reject: %q %v", h, d.Name, why, err)
		}
	})
}

// FuzzChecksum feeds the image checksum and algorithm of instance_info
// (image_checksum, or image_os_hash_algo and image_os_hash_value) to
// checksumSetup, which Write runs before touching the disk. What it
// accepts must be a hash it can compute and a digest of that hash's size.
func FuzzChecksum(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, c := range [][2]string{
		{sum, ""}, {"sha256:" + sum, ""}, {"SHA512:" + strings.Repeat("0", 128), ""}, {sum, "sha256"}, {sum, "sha512"}, {"sha384:" + strings.Repeat("0", 96), ""},
		{strings.Repeat("0", 32), ""}, {"md5:" + strings.Repeat("0", 32), ""}, {"sha256:xyz", ""}, {"", ""}, {":", "sha256"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, checksum, algo string) {
		h, name, want, err := checksumSetup(Options{Checksum: checksum, ChecksumAlgo: algo})
		if err != nil {
			return
		}
		if h == nil || (name != "sha256" && name != "sha384" && name != "sha512") || len(want) != 2*h.Size() {
			t.Fatalf("checksumSetup(%q, %q) = %v %q %q", checksum, algo, h, name, want)
		}
	})
}

// FuzzWriteImage streams arbitrary bytes as an image through Write onto
// a 1 MiB file standing in for the disk: the magic-byte detection, the
// gzip and zstd decoders and the size bound all see outside bytes (the
// image server's). Write must never panic, never write past the device,
// report what it wrote, and never let a small input make the ramdisk,
// whose memory is the node's RAM minus the initramfs, allocate hundreds
// of megabytes (a zstd frame header may ask for a window of up to 3.75 TB).
func FuzzWriteImage(f *testing.F) {
	img := testImage(64 << 10)
	f.Add(img[:4096])
	f.Add(gzipped(img))
	f.Add(zstded(img))
	f.Add(zstded(bytes.Repeat([]byte{0}, 4<<20))) // decompresses past the device
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"))
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0})
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0})
	f.Add([]byte{})
	const size = 1 << 20
	// Write ends with an fsync of the target: on a disk that would cost
	// more than everything else, so the target lives in /dev/shm if any.
	dir := f.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "bm-fuzz-image-"); err == nil {
			dir = d
			f.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "target.img")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		dev := disk.Device{Name: "target.img", Path: p, SizeBytes: size, Regular: true}
		// runtime/metrics, unlike ReadMemStats, does not stop the world
		// (which cost this target nine executions in ten).
		allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(allocs)
		before := allocs[0].Value.Uint64()
		res, err := Write(t.Context(), Source{Reader: bytes.NewReader(data), Size: int64(len(data))}, dev,
			Options{InsecureSkipChecksum: true, NoDirect: true, BufferBytes: 64 << 10})
		metrics.Read(allocs)
		// The pipeline's buffers and zstd's largest window this program
		// accepts (maxZstdWindow) fit; the default 512 MiB window does not.
		if alloc := allocs[0].Value.Uint64() - before; alloc > maxZstdWindow+32<<20 {
			t.Fatalf("writing a %d-byte image allocated %d MiB", len(data), alloc>>20)
		}
		if res.Written > size {
			t.Fatalf("wrote %d bytes to a %d-byte device", res.Written, size)
		}
		st, serr := os.Stat(p)
		if serr != nil {
			t.Fatal(serr)
		}
		if st.Size() > size {
			t.Fatalf("device file grew to %d bytes", st.Size())
		}
		if err == nil && (res.Written == 0 || uint64(st.Size()) < res.Written) {
			t.Fatalf("success with %d bytes written, file of %d", res.Written, st.Size())
		}
	})
}
