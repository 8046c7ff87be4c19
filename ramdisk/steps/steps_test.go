package steps

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// junk writes size random bytes to a new file and describes it as a disk.
func junk(t *testing.T, name string, size int) disk.Device {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := disk.FromPath(p, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func runner(devs []disk.Device, listErr error) *Runner {
	return &Runner{
		Log:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		List:  func() ([]disk.Device, error) { return devs, listErr },
		Erase: disk.EraseOptions{Hardware: []disk.HardwareEraser{}},
	}
}

func names(ss []protocol.Step) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Step)
	}
	return strings.Join(out, ",")
}

func TestStepsOfferedByHardware(t *testing.T) {
	d := junk(t, "vda", 4096)
	ro, vm, rm, pm := d, d, d, d
	ro.ReadOnly = true
	vm.VirtualMedia = true
	rm.Removable = true
	pm.ParamsMedium = true
	const noDisk = "inspect_hardware,verify_hardware,burnin_cpu,burnin_memory,burnin_network,erase_pstore"
	for _, c := range []struct {
		name         string
		devs         []disk.Device
		err          error
		clean, deplo string
	}{
		{"a writable disk", []disk.Device{d}, nil, noDisk + ",erase_devices_metadata,erase_devices,erase_devices_express,burnin_disk,create_configuration,delete_configuration,apply_configuration", "write_image,apply_configuration"},
		{"no disk", nil, nil, noDisk, ""},
		{"only read-only and virtual media", []disk.Device{ro, vm}, nil, noDisk, ""},
		{"only removable and the parameters medium", []disk.Device{rm, pm}, nil, noDisk, ""},
		{"listing fails", nil, errors.New("no sysfs"), noDisk, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			clean, deploy := runner(c.devs, c.err).Steps()
			if names(clean) != c.clean || names(deploy) != c.deplo {
				t.Fatalf("clean %q deploy %q, want %q and %q", names(clean), names(deploy), c.clean, c.deplo)
			}
			for _, s := range clean {
				want := map[string]int{"inspect_hardware": 0, "erase_devices_metadata": 99, "erase_devices": 10}[s.Step]
				iface := map[string]string{"create_configuration": "raid", "delete_configuration": "raid", "apply_configuration": "raid"}[s.Step]
				if iface == "" {
					iface = "deploy"
				}
				if s.Priority != want || s.Interface != iface {
					t.Errorf("%s: interface %s priority %d, want %s %d", s.Step, s.Interface, s.Priority, iface, want)
				}
			}
		})
	}
}

func TestUnknownStep(t *testing.T) {
	_, err := runner(nil, nil).Run(t.Context(), protocol.Step{Interface: "raid", Step: "no_such_step"}, func(float64, string) {})
	if err == nil || !strings.Contains(err.Error(), "raid.no_such_step") {
		t.Fatalf("unknown step: %v", err)
	}
}

// progressLog records progress calls (erase_devices reports from several
// goroutines).
type progressLog struct {
	mu   sync.Mutex
	last float64
	n    int
}

func (p *progressLog) fn(f float64, _ string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last, p.n = f, p.n+1
}

// As IPA: a read-only device fails erase_devices, naming it and the
// argument that skips it, before anything is written; with the argument
// it is skipped and the result says so.
func TestEraseDevicesReadOnlyFailsUnlessSkipped(t *testing.T) {
	a, b := junk(t, "vda", 1<<20), junk(t, "vdb", 3<<20+512)
	ro := junk(t, "sdr", 64<<10)
	ro.ReadOnly = true
	before, _ := os.ReadFile(ro.Path)
	beforeA, _ := os.ReadFile(a.Path)
	r := runner([]disk.Device{a, b, ro}, nil)
	var pl progressLog
	_, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "erase_devices"}, pl.fn)
	if err == nil || !strings.Contains(err.Error(), ro.Path+" is read-only") || !strings.Contains(err.Error(), "agent_erase_skip_read_only=true") {
		t.Fatalf("erase_devices with a read-only device: %v; want a refusal naming it and agent_erase_skip_read_only", err)
	}
	if got, _ := os.ReadFile(a.Path); !bytes.Equal(got, beforeA) {
		t.Fatal("a refused erase_devices wrote to a disk")
	}
	res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "erase_devices", Args: map[string]any{"agent_erase_skip_read_only": "true"}}, pl.fn)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []disk.Device{a, b} {
		got, _ := os.ReadFile(d.Path)
		if !bytes.Equal(got, make([]byte, len(got))) {
			t.Errorf("%s is not all zeroes after erase_devices", d.Path)
		}
	}
	if after, _ := os.ReadFile(ro.Path); !bytes.Equal(before, after) {
		t.Error("the read-only device was written")
	}
	devs, _ := res["devices"].([]disk.EraseResult)
	if len(devs) != 2 {
		t.Fatalf("result devices = %#v, want the two writable ones", res["devices"])
	}
	for _, x := range devs {
		if x.Method != disk.MethodOverwrite || x.VerifiedSamples == 0 {
			t.Errorf("%s: method %q, %d samples verified; want overwrite, verified", x.Device, x.Method, x.VerifiedSamples)
		}
	}
	if pl.n == 0 || pl.last != 1 {
		t.Errorf("progress: %d calls, last %v; want it to reach 1", pl.n, pl.last)
	}
	sum, _ := res["summary"].(string)
	for _, want := range []string{a.Path + " overwrite-zeros", b.Path + " overwrite-zeros", "samples verified"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q lacks %q", sum, want)
		}
	}
	if !strings.Contains(sum, ro.Path+" skipped (read-only, agent_erase_skip_read_only)") {
		t.Errorf("summary %q does not say the read-only device was skipped and why", sum)
	}
}

func TestEraseFailureIsNotDone(t *testing.T) {
	a := junk(t, "vda", 1<<20)
	r := runner([]disk.Device{a}, nil)
	r.Erase.Open = func(path string, mode disk.OpenMode) (disk.Target, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: errors.New("input/output error")}
	}
	for _, step := range []string{"erase_devices", "erase_devices_metadata"} {
		res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: step}, func(float64, string) {})
		if err == nil || !strings.Contains(err.Error(), "input/output error") || res != nil {
			t.Errorf("%s with an unopenable disk: result %v, err %v; want a failure naming the I/O error", step, res, err)
		}
	}
	if _, err := runner(nil, errors.New("sysfs is not mounted")).Run(t.Context(), protocol.Step{Interface: "deploy", Step: "erase_devices"}, func(float64, string) {}); err == nil {
		t.Error("erase_devices with a failing device listing succeeded")
	}
}

func TestWriteImageArgs(t *testing.T) {
	img := make([]byte, 256<<10)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + ln.Addr().String() + "/img.raw"

	target := junk(t, "vda", 1<<20)
	r := runner([]disk.Device{target}, nil)
	r.Erase.ProcRoot = t.TempDir() // no mounts
	run := func(args map[string]any) (map[string]any, error) {
		return r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "write_image", Args: args}, func(float64, string) {})
	}
	hints := map[string]any{"name": "/dev/vda"}

	if _, err := run(map[string]any{"root_device": hints}); err == nil || !strings.Contains(err.Error(), "image_source") {
		t.Errorf("no image_source: %v", err)
	}
	if _, err := run(map[string]any{"image_source": url, "image_checksum": hex.EncodeToString(sum[:]), "root_device": map[string]any{"name": "/dev/sdz"}}); err == nil || !strings.Contains(err.Error(), "sdz") {
		t.Errorf("hints matching no disk: %v", err)
	}
	if _, err := run(map[string]any{"image_source": url, "image_checksum": hex.EncodeToString(sum[:]), "root_device": "not an object"}); err == nil || !strings.Contains(err.Error(), "root_device") {
		t.Errorf("malformed hints: %v", err)
	}
	wrong := sha256.Sum256([]byte("other"))
	if _, err := run(map[string]any{"image_source": url, "image_os_hash_algo": "sha256", "image_os_hash_value": hex.EncodeToString(wrong[:]), "root_device": hints}); err == nil ||
		!strings.Contains(err.Error(), "its sha256 is not the "+hex.EncodeToString(wrong[:])+" given") || strings.Contains(err.Error(), hex.EncodeToString(sum[:])) {
		t.Errorf("wrong checksum: %v; want the checksum given named, and not the digest received", err)
	}
	res, err := run(map[string]any{"image_source": url, "image_os_hash_algo": "sha256", "image_os_hash_value": hex.EncodeToString(sum[:]), "root_device": hints})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target.Path)
	if !bytes.Equal(got[:len(img)], img) {
		t.Error("the disk does not start with the image")
	}
	if res["image"] == nil {
		t.Errorf("result %v has no image report", res)
	}
	if sum, _ := res["summary"].(string); !strings.Contains(sum, "written to "+target.Path) || !strings.Contains(sum, "sha256 verified") {
		t.Errorf("summary %q does not say where the image went and that its sha256 was verified", sum)
	}
}
