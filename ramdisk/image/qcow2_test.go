package image

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// needQemuImg returns qemu-img's path, or skips (fails under BM_REQUIRE_ALL=1).
func needQemuImg(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("qemu-img is missing (Debian package qemu-utils; scripts/install-test-deps.sh installs it): %v", err)
		}
		t.Skip("qemu-img is missing; install Debian's qemu-utils (scripts/install-test-deps.sh)")
	}
	return p
}

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(needQemuImg(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// holeyImage is a raw disk image of random data with holes of zeros of
// many sizes, some not aligned to anything, and a zero tail.
func holeyImage(size int) []byte {
	r := rand.New(rand.NewPCG(11, 12))
	b := make([]byte, size)
	for i := 0; i < size; {
		n := 1 + r.IntN(300<<10)
		if r.IntN(3) > 0 {
			for j := i; j < min(i+n, size); j++ {
				b[j] = byte(r.Uint32())
			}
		}
		i += n
	}
	clear(b[size-(200<<10):])
	return b
}

// qcowFixture converts raw into qcow2 with qemu-img's options and returns
// the qcow2 file's bytes.
func qcowFixture(t testing.TB, dir string, raw []byte, name string, opts ...string) []byte {
	t.Helper()
	rawPath := filepath.Join(dir, "raw.img")
	if _, err := os.Stat(rawPath); err != nil {
		if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name)
	qemuImg(t, append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, opts...), rawPath, out)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// qcowServer serves files at /range/NAME with Range support (as the site
// cache serves a cached image) and at /plain/NAME without (as a plain
// server, or the site cache while it still fetches the image), counting
// the Range requests answered.
func qcowServer(t testing.TB, files map[string][]byte) (*httptest.Server, *atomic.Int32) {
	var ranges atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		b, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		switch kind {
		case "range":
			if r.Header.Get("Range") != "" {
				ranges.Add(1)
			}
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
		case "liar": // Range requests get other bytes than the full file
			if r.Header.Get("Range") != "" {
				b = files[name+".lie"]
			}
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
		case "plain":
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &ranges
}

// tablesAtEnd rewrites a qcow2 file so that its L2 tables and then its
// L1 table lie after all the data, at the end of the file: a layout
// qemu reads like any other, which a one-pass reader without Range
// requests cannot.
func tablesAtEnd(t testing.TB, b []byte) []byte {
	t.Helper()
	h, err := parseQcowHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	cs := h.clusterSize
	out := append([]byte(nil), b...)
	grow := func() uint64 {
		off := (uint64(len(out)) + cs - 1) / cs * cs
		out = append(out, make([]byte, off+cs-uint64(len(out)))...)
		return off
	}
	l1 := append([]byte(nil), b[h.l1Offset:h.l1Offset+h.l1Bytes()]...)
	l2s, err := h.parseQcowL1(l1)
	if err != nil {
		t.Fatal(err)
	}
	for i, off := range l2s {
		if off == 0 {
			continue
		}
		at := grow()
		copy(out[at:], b[off:off+cs])
		clear(out[off : off+cs])
		binary.BigEndian.PutUint64(l1[i*8:], at|1<<63)
	}
	at := grow()
	out = append(out, make([]byte, (uint64(len(l1))+cs-1)/cs*cs)...)
	copy(out[at:], l1)
	clear(out[h.l1Offset : h.l1Offset+uint64(len(l1))])
	binary.BigEndian.PutUint64(out[40:], at)
	return out
}

func TestWriteQcow2(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	raw := holeyImage(6<<20 + 12<<10)
	// Each variant is made by qemu-img convert from the same raw image.
	variants := map[string][]string{
		"v3.qcow2":         nil,
		"v3c.qcow2":        {"-c"},
		"v2.qcow2":         {"-o", "compat=0.10"},
		"v2c.qcow2":        {"-c", "-o", "compat=0.10"},
		"zstd.qcow2":       {"-c", "-o", "compression_type=zstd"},
		"4k.qcow2":         {"-o", "cluster_size=4096"},
		"512c.qcow2":       {"-c", "-o", "cluster_size=512"},
		"prealloc.qcow2":   {"-o", "preallocation=metadata"},
		"lazydirty.qcow2":  {"-o", "lazy_refcounts=on"},
		"tablesend.qcow2":  nil, // rewritten below
		"tablesendc.qcow2": {"-c"},
	}
	files := map[string][]byte{}
	for name, opts := range variants {
		files[name] = qcowFixture(t, dir, raw, name, opts...)
	}
	files["tablesend.qcow2"] = tablesAtEnd(t, files["tablesend.qcow2"])
	files["tablesendc.qcow2"] = tablesAtEnd(t, files["tablesendc.qcow2"])
	// qemu itself reads the rewritten layout as the raw image.
	for _, name := range []string{"tablesend.qcow2", "tablesendc.qcow2"} {
		p := filepath.Join(dir, name+".moved")
		os.WriteFile(p, files[name], 0o644)
		qemuImg(t, "convert", "-f", "qcow2", "-O", "raw", p, p+".raw")
		if back, _ := os.ReadFile(p + ".raw"); !bytes.Equal(back, raw) {
			t.Fatalf("qemu-img reads the rewritten %s differently from the raw image", name)
		}
	}
	srv, ranges := qcowServer(t, files)

	for _, name := range []string{"v3.qcow2", "v3c.qcow2", "v2.qcow2", "v2c.qcow2", "zstd.qcow2", "4k.qcow2", "512c.qcow2", "prealloc.qcow2", "lazydirty.qcow2", "tablesend.qcow2", "tablesendc.qcow2"} {
		for _, mode := range []string{"range", "plain", "reader"} {
			if mode != "range" && strings.HasPrefix(name, "tablesend") {
				continue // TestWriteQcow2Refusals: needs Range
			}
			t.Run(name+"/"+mode, func(t *testing.T) {
				file := files[name]
				// The disk held something else: the image's holes must
				// be zeroed, and nothing past it touched.
				dev := targetFile(t, len(raw)+1<<20)
				before := ranges.Load()
				var last Progress
				opts := Options{Checksum: sha256hex(file), BufferBytes: 256 << 10, Progress: func(p Progress) { last = p }}
				src := Source{URL: srv.URL + "/" + mode + "/" + name}
				if mode == "reader" {
					src = Source{Reader: bytes.NewReader(file), Size: int64(len(file))}
				}
				if name == "v3.qcow2" {
					opts.DiskFormat = "qcow2"
				}
				if name == "512c.qcow2" && mode != "range" {
					// qemu-img writes compressed 512-byte clusters up to
					// a few hundred KiB before the L2 table that maps
					// them: one pass needs the default 4 MiB lookbehind.
					opts.BufferBytes = 0
				}
				res, err := Write(t.Context(), src, dev, opts)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(dev.Path)
				if sha256hex(got[:len(raw)]) != sha256hex(raw) {
					t.Fatalf("the disk's first %d bytes differ from the raw image", len(raw))
				}
				if got[len(raw)] != 0xFF || got[len(got)-1] != 0xFF {
					t.Fatal("bytes past the image's virtual size were changed")
				}
				if res.Format != FormatQcow2 || res.Written != uint64(len(raw)) || res.Downloaded != uint64(len(file)) || res.Checksum != sha256hex(file) {
					t.Errorf("result = %+v", res)
				}
				if last.Written != uint64(len(raw)) || last.Downloaded != uint64(len(file)) {
					t.Errorf("last progress = %+v", last)
				}
				n := ranges.Load() - before
				if mode == "range" && n == 0 {
					t.Error("no Range request was made to read the tables ahead")
				}
				t.Logf("%d bytes of qcow2, %d Range requests", len(file), n)
			})
		}
	}
}

// TestWriteQcow2Refusals: images the ramdisk must not write, each with
// an error that says why and what to do, and no success reported.
func TestWriteQcow2Refusals(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	raw := holeyImage(2 << 20)
	good := qcowFixture(t, dir, raw, "good.qcow2")
	goodc := qcowFixture(t, dir, raw, "goodc.qcow2", "-c")
	qemuImg(t, "create", "-f", "qcow2", "-b", "good.qcow2", "-F", "qcow2", filepath.Join(dir, "overlay.qcow2"))
	overlay, _ := os.ReadFile(filepath.Join(dir, "overlay.qcow2"))
	qemuImg(t, "create", "-f", "qcow2", "--object", "secret,id=sec0,data=secret", "-o", "encrypt.format=luks,encrypt.key-secret=sec0", filepath.Join(dir, "enc.qcow2"), "1M")
	enc, _ := os.ReadFile(filepath.Join(dir, "enc.qcow2"))
	qemuImg(t, "create", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), filepath.Join(dir, "ext.qcow2"), "1M")
	ext, _ := os.ReadFile(filepath.Join(dir, "ext.qcow2"))
	qemuImg(t, "create", "-f", "qcow2", "-o", "extended_l2=on", filepath.Join(dir, "l2x.qcow2"), "1M")
	l2x, _ := os.ReadFile(filepath.Join(dir, "l2x.qcow2"))
	others := map[string][]byte{}
	for _, f := range []string{"vmdk", "vhdx", "vdi", "qed"} {
		p := filepath.Join(dir, "img."+f)
		qemuImg(t, "convert", "-f", "raw", "-O", f, filepath.Join(dir, "raw.img"), p)
		others[f], _ = os.ReadFile(p)
	}
	unknown := append([]byte(nil), good...)
	unknown[72+7] |= 1 << 5
	corrupt := append([]byte(nil), good...)
	corrupt[72+7] |= qcowIncompatCorrupt
	v4 := append([]byte(nil), good...)
	v4[7] = 4
	ends := tablesAtEnd(t, good)
	// A server whose Range answers differ from its full file: the
	// first used L2 entry is cleared in what the Range requests read.
	lie := append([]byte(nil), good...)
	h, _ := parseQcowHeader(good)
	l2s, _ := h.parseQcowL1(good[h.l1Offset : h.l1Offset+h.l1Bytes()])
	for i := l2s[0]; i < l2s[0]+h.clusterSize; i += 8 {
		if binary.BigEndian.Uint64(lie[i:]) != 0 {
			clear(lie[i : i+8])
			break
		}
	}
	if bytes.Equal(lie, good) {
		t.Fatal("the first L2 table maps nothing")
	}
	files := map[string][]byte{"good.qcow2.lie": lie,
		"good.qcow2": good, "goodc.qcow2": goodc, "overlay.qcow2": overlay, "enc.qcow2": enc, "ext.qcow2": ext, "l2x.qcow2": l2x,
		"unknown.qcow2": unknown, "corrupt.qcow2": corrupt, "v4.qcow2": v4, "ends.qcow2": ends,
		"cut.qcow2": good[:len(good)/2], "cutc.qcow2": goodc[:len(goodc)-1000], "header.qcow2": good[:50],
		"raw.img": raw, "img.vmdk": others["vmdk"], "img.vhdx": others["vhdx"], "img.vdi": others["vdi"], "img.qed": others["qed"],
	}
	srv, _ := qcowServer(t, files)
	cases := []struct {
		name, url string
		opts      Options
		size      int
		want      string
	}{
		{"backing file", "/range/overlay.qcow2", Options{InsecureSkipChecksum: true}, 0, `has a backing file "good.qcow2"`},
		{"encrypted", "/range/enc.qcow2", Options{InsecureSkipChecksum: true}, 0, "is encrypted"},
		{"external data file", "/range/ext.qcow2", Options{InsecureSkipChecksum: true}, 0, "external data file"},
		{"extended L2", "/range/l2x.qcow2", Options{InsecureSkipChecksum: true}, 0, "extended L2 entries"},
		{"unknown incompatible feature", "/range/unknown.qcow2", Options{InsecureSkipChecksum: true}, 0, "incompatible features unknown to the ramdisk (bits 0x20)"},
		{"marked corrupt", "/range/corrupt.qcow2", Options{InsecureSkipChecksum: true}, 0, "marked corrupt"},
		{"version 4", "/range/v4.qcow2", Options{InsecureSkipChecksum: true}, 0, "qcow2 version 4 is not supported"},
		{"truncated (Range)", "/range/cut.qcow2", Options{InsecureSkipChecksum: true}, 0, "the file is truncated"},
		{"truncated (stream)", "/plain/cut.qcow2", Options{InsecureSkipChecksum: true}, 0, "the file is truncated"},
		{"truncated compressed (stream)", "/plain/cutc.qcow2", Options{InsecureSkipChecksum: true}, 0, "truncated"},
		{"truncated header", "/plain/header.qcow2", Options{InsecureSkipChecksum: true}, 0, "header is cut short"},
		{"checksum mismatch (Range)", "/range/good.qcow2", Options{Checksum: sha256hex(raw)}, 0, "checksum mismatch for"},
		{"checksum mismatch (stream)", "/plain/goodc.qcow2", Options{Checksum: sha256hex(good)}, 0, "its sha256 is not the " + sha256hex(good) + " given"},
		{"Range answers differ from the download", "/liar/good.qcow2", Options{InsecureSkipChecksum: true}, 0, "differs between the Range request and the full download"},
		{"tables after data without Range", "/plain/ends.qcow2", Options{InsecureSkipChecksum: true, BufferBytes: 64 << 10}, 0, "did not answer Range requests"},
		{"larger than the device", "/range/good.qcow2", Options{InsecureSkipChecksum: true}, 1 << 20, "virtual size of 2097152 bytes, larger than"},
		{"disk_format raw, image qcow2", "/range/good.qcow2", Options{InsecureSkipChecksum: true, DiskFormat: "raw"}, 0, "is qcow2 but instance_info image_disk_format says raw"},
		{"disk_format qcow2, image raw", "/range/raw.img", Options{InsecureSkipChecksum: true, DiskFormat: "qcow2"}, 0, "is raw but instance_info image_disk_format says qcow2"},
		{"VMDK", "/plain/img.vmdk", Options{InsecureSkipChecksum: true}, 0, "is VMDK, which the ramdisk does not write"},
		{"VHDX", "/plain/img.vhdx", Options{InsecureSkipChecksum: true}, 0, "is VHDX, which"},
		{"VDI", "/plain/img.vdi", Options{InsecureSkipChecksum: true}, 0, "is VDI, which"},
		{"QED", "/plain/img.qed", Options{InsecureSkipChecksum: true}, 0, "is QED, which"},
		{"disk_format vmdk", "/range/good.qcow2", Options{InsecureSkipChecksum: true, DiskFormat: "vmdk"}, 0, `image_disk_format "vmdk" is not supported`},
	}
	received := map[string]string{"checksum mismatch (Range)": sha256hex(good), "checksum mismatch (stream)": sha256hex(goodc)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := c.size
			if size == 0 {
				size = 4 << 20
			}
			dev := targetFile(t, size)
			var last Progress
			c.opts.Progress = func(p Progress) { last = p }
			res, err := Write(t.Context(), Source{URL: srv.URL + c.url}, dev, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want containing %q", err, c.want)
			}
			// A mismatch names the checksum given, never the digest of
			// what was received.
			if d := received[c.name]; d != "" && strings.Contains(err.Error(), d) {
				t.Fatalf("err = %v names the digest of what was received", err)
			}
			t.Logf("error: %v", err)
			if res.Reread != "" || res.Duration != 0 {
				t.Fatalf("a failed write reports a finished one: %+v", res)
			}
			if last.Written > 0 && !strings.Contains(err.Error(), "partial") && !strings.Contains(err.Error(), "unverified") {
				t.Fatalf("%d bytes were written but the error does not say the device holds a partial image", last.Written)
			}
		})
	}
}

// BenchmarkWriteQcow2 writes the same 64 MiB raw image (half random data,
// half holes) as raw and as qcow2 made by qemu-img (plain and -c), from
// a loopback server with Range support, onto a file:
//
//	go test -run '^$' -bench WriteQcow2 ./ramdisk/image/
func BenchmarkWriteQcow2(b *testing.B) {
	needQemuImg(b)
	dir := b.TempDir()
	img := testImage(64 << 20)
	files := map[string][]byte{"img.raw": img,
		"img.qcow2":  qcowFixture(b, dir, img, "img.qcow2"),
		"imgc.qcow2": qcowFixture(b, dir, img, "imgc.qcow2", "-c")}
	srv, _ := qcowServer(b, files)
	for _, name := range []string{"img.raw", "img.qcow2", "imgc.qcow2"} {
		b.Run(name, func(b *testing.B) {
			dev := targetFile(b, 65<<20)
			b.SetBytes(int64(len(img)))
			for b.Loop() {
				if _, err := Write(b.Context(), Source{URL: srv.URL + "/range/" + name}, dev, Options{Checksum: sha256hex(files[name])}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWriteQcow2TooFragmented: an image with more separate pieces than the
// writer keeps track of is refused, both ways of reading its tables (the
// bound is lowered to what a small image reaches).
func TestWriteQcow2TooFragmented(t *testing.T) {
	raw := holeyImage(2 << 20)
	img := qcowFixture(t, t.TempDir(), raw, "frag.qcow2", "-o", "cluster_size=4096")
	defer func(n int) { qcowMaxExtents = n }(qcowMaxExtents)
	qcowMaxExtents = 3
	srv, _ := qcowServer(t, map[string][]byte{"frag.qcow2": img})
	for _, mode := range []string{"range", "plain"} {
		_, err := Write(t.Context(), Source{URL: srv.URL + "/" + mode + "/frag.qcow2"}, targetFile(t, 3<<20), Options{InsecureSkipChecksum: true})
		if err == nil || !strings.Contains(err.Error(), "fragmented into more than 3 separate pieces") {
			t.Errorf("%s: err = %v, want the image refused as too fragmented", mode, err)
		}
	}
}
