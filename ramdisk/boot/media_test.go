package boot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/bootmedia"
)

const secret = "pa55-w0rd"

func TestCmdlineHasNode(t *testing.T) {
	for in, want := range map[string]bool{
		"console=ttyS0 bm.node=n1":                  true,
		"console=ttyS0 panic=1 loglevel=4":          false,
		"bm.node= console=ttyS0":                    false,
		"bm.node=n1 bm.node=":                       false, // the last one wins
		`bm.node="n 1"`:                             true,
		"bm.nodes=n1 xbm.node=n1":                   false,
		"initrd=initrd console=ttyS0 bm.site=lab":   false,
		"BOOT_IMAGE=/vmlinuz bm.node=6f0c1c8e bm.x": true,
	} {
		if got := CmdlineHasNode(in); got != want {
			t.Errorf("CmdlineHasNode(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestMergeParams(t *testing.T) {
	cmdline := "BOOT_IMAGE=/boot/vmlinuz console=tty0 console=ttyS0,115200 panic=1 bm.debug bm.broker=mqtt://wrong:1883 bm.ip=dhcp\n"
	media := "bm.node=n1 bm.site=lab bm.broker=mqtts://10.0.2.2:8883 bm.user=node:n1 bm.password=" + secret +
		" bm.ip=10.0.2.15/24 bm.gw=10.0.2.2 bm.x=\"a b\""
	p, err := MergeParams(cmdline, media)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != "n1" || p.Site != "lab" || p.User != "node:n1" || p.Password != secret || !p.Debug ||
		p.Broker != "mqtts://10.0.2.2:8883" || p.Net.Mode != IPStatic || p.Net.Addr.String() != "10.0.2.15/24" || p.All["bm.x"] != "a b" {
		t.Fatalf("merged: %+v", p)
	}
	if s := p.String(); strings.Contains(s, secret) || !strings.Contains(s, "bm.password=<redacted>") {
		t.Fatalf("String() = %q", s)
	}
	// An unclosed quote on the command line does not swallow the medium.
	if p, err := MergeParams(`bm.note="unclosed`, "bm.node=n2"); err != nil || p.Node != "n2" {
		t.Fatalf("unclosed quote: %+v %v", p, err)
	}
	// The medium's errors are reported like the command line's.
	if _, err := MergeParams("console=ttyS0", "bm.node=n1 bm.ip=not-an-address"); err == nil || !strings.Contains(err.Error(), `bm.ip="not-an-address"`) {
		t.Fatalf("bad medium: %v", err)
	}
	if _, err := MergeParams("console=ttyS0", "bm.site=lab"); err != ErrNoNode {
		t.Fatalf("a medium without bm.node: %v", err)
	}
}

// fakeBlock is a fake /sys/block and /dev: each device has a sysfs
// directory with size and dev, and a regular file as its device node.
type fakeBlock struct {
	t        *testing.T
	sys, dev string
	minor    int
}

func newFakeBlock(t *testing.T) *fakeBlock {
	root := t.TempDir()
	f := &fakeBlock{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev")}
	for _, d := range []string{filepath.Join(f.sys, "block"), f.dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// add creates device name holding data (nil: a drive without medium).
func (f *fakeBlock) add(name string, data []byte) {
	f.t.Helper()
	dir := filepath.Join(f.sys, "block", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.minor += 16
	size := (len(data) + 511) / 512
	for file, c := range map[string]string{"size": fmt.Sprint(size), "dev": fmt.Sprintf("8:%d", f.minor)} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(c+"\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if data != nil {
		padded := append(append([]byte(nil), data...), make([]byte, size*512-len(data))...)
		if err := os.WriteFile(filepath.Join(f.dev, name), padded, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

type logRec struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRec) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logRec) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func paramsImage(t *testing.T, text string) []byte {
	t.Helper()
	img, err := bootmedia.ParamsImage(text)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func junkData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

func TestFindParamsMedium(t *testing.T) {
	f := newFakeBlock(t)
	f.add("nvme0n1", junkData(1<<20))
	f.add("sda", junkData(64<<10)) // a small disk
	f.add("sr0", nil)              // a CD drive without medium
	f.add("sdb", paramsImage(t, "bm.node=n1 bm.password="+secret))
	f.add("ram0", paramsImage(t, "bm.node=ignored")) // never looked at
	f.add("loop0", paramsImage(t, "bm.node=ignored"))
	var log logRec
	opens := map[string]int{}
	opts := MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: 5 * time.Second, Poll: 10 * time.Millisecond,
		Open: func(p string) (io.ReaderAt, io.Closer, error) {
			opens[filepath.Base(p)]++
			fh, err := os.Open(p)
			return fh, fh, err
		}}
	m, err := FindParamsMedium(context.Background(), opts, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "sdb" || m.Path != filepath.Join(f.dev, "sdb") || m.DevNo != "8:64" || m.Text != "bm.node=n1 bm.password="+secret {
		t.Fatalf("found %+v", m)
	}
	if opens["ram0"]+opens["loop0"]+opens["sr0"] != 0 {
		t.Fatalf("opened devices it must skip: %v", opens)
	}
	if strings.Contains(log.String(), secret) || !strings.Contains(log.String(), "boot parameters medium "+m.Path+" (8:64)") {
		t.Fatalf("log:\n%s", log.String())
	}
	t.Logf("log:\n%s", log.String())
}

// TestFindParamsMediumLate: the medium shows up after a few scans (a USB
// device enumerating after its controller's module loaded); Rescan runs
// before every scan but the first; a device known not to be the medium
// is not read again.
func TestFindParamsMediumLate(t *testing.T) {
	f := newFakeBlock(t)
	f.add("vda", junkData(1<<20))
	var log logRec
	opens := map[string]int{}
	rescans := 0
	opts := MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: 5 * time.Second, Poll: 10 * time.Millisecond, LogEvery: 20 * time.Millisecond,
		Rescan: func(context.Context) {
			rescans++
			if rescans == 8 {
				f.add("sda", paramsImage(t, "bm.node=late"))
			}
		},
		Open: func(p string) (io.ReaderAt, io.Closer, error) {
			opens[filepath.Base(p)]++
			fh, err := os.Open(p)
			return fh, fh, err
		}}
	m, err := FindParamsMedium(context.Background(), opts, log.logf)
	if err != nil || m.Text != "bm.node=late" || m.Name != "sda" {
		t.Fatalf("%+v %v", m, err)
	}
	if rescans != 8 || opens["vda"] != 1 || opens["sda"] != 1 {
		t.Fatalf("rescans %d, opens %v; want 8 rescans and each device read once", rescans, opens)
	}
	if !strings.Contains(log.String(), "no boot parameters medium yet after") || !strings.Contains(log.String(), "vda (not a parameters medium)") {
		t.Fatalf("no progress line naming the devices:\n%s", log.String())
	}
}

func TestFindParamsMediumTimeout(t *testing.T) {
	f := newFakeBlock(t)
	f.add("sda", junkData(1<<20))
	f.add("sr0", nil)
	var log logRec
	start := time.Now()
	_, err := FindParamsMedium(context.Background(), MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: 100 * time.Millisecond, Poll: 10 * time.Millisecond}, log.logf)
	if err == nil || !strings.Contains(err.Error(), "no boot parameters medium") || !strings.Contains(err.Error(), "sda (not a parameters medium), sr0 (no medium)") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 3*time.Second {
		t.Fatalf("gave up after %s, want about 100ms", d)
	}
	t.Log(err)
	// Cancelled: returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := FindParamsMedium(ctx, MediaOptions{SysRoot: f.sys, DevRoot: f.dev}, log.logf); err != context.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestFindParamsMediumRefuses(t *testing.T) {
	broken := paramsImage(t, "bm.node=n1 bm.password="+secret)
	broken[21*2048+4] = 0 // a NUL in the text
	for name, devs := range map[string]map[string][]byte{
		"unusable medium": {"sda": broken},
		"media disagree":  {"sda": paramsImage(t, "bm.node=a"), "sr0": paramsImage(t, "bm.node=b")},
	} {
		f := newFakeBlock(t)
		for n, d := range devs {
			f.add(n, d)
		}
		var log logRec
		_, err := FindParamsMedium(context.Background(), MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: time.Second, Poll: 10 * time.Millisecond}, log.logf)
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// The same parameters twice (a CD and a USB stick of the same boot): fine.
	f := newFakeBlock(t)
	f.add("sda", paramsImage(t, "bm.node=a"))
	f.add("sr0", paramsImage(t, "bm.node=a"))
	var log logRec
	if m, err := FindParamsMedium(context.Background(), MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: time.Second}, log.logf); err != nil || m.Name != "sda" {
		t.Fatalf("same medium twice: %+v %v", m, err)
	}
}

// flakyReader fails its first reads as a device still settling does.
type flakyReader struct {
	r     *bytes.Reader
	fails *int
}

func (f flakyReader) ReadAt(p []byte, off int64) (int, error) {
	if *f.fails > 0 {
		*f.fails--
		return 0, &fs.PathError{Op: "read", Path: "/dev/sda", Err: syscall.EIO}
	}
	return f.r.ReadAt(p, off)
}

func TestFindParamsMediumReadErrorRetried(t *testing.T) {
	f := newFakeBlock(t)
	img := paramsImage(t, "bm.node=n1")
	f.add("sda", img)
	fails := 2
	var log logRec
	opts := MediaOptions{SysRoot: f.sys, DevRoot: f.dev, Timeout: 5 * time.Second, Poll: 10 * time.Millisecond,
		Open: func(string) (io.ReaderAt, io.Closer, error) {
			return flakyReader{bytes.NewReader(img), &fails}, io.NopCloser(nil), nil
		}}
	m, err := FindParamsMedium(context.Background(), opts, log.logf)
	if err != nil || m.Text != "bm.node=n1" || fails != 0 {
		t.Fatalf("%+v %v (fails left %d)", m, err, fails)
	}
}
