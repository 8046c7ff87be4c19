package disk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// zeroingEraser stands in for NVMe Format on devices named nvme*: it
// zeroes the file behind the device.
type zeroingEraser struct{ fail error }

func (z zeroingEraser) Detect(_ context.Context, d Device) (Method, bool, string) {
	if strings.HasPrefix(d.Name, "nvme") {
		return MethodNVMeUserDataFormat, true, ""
	}
	return "", false, "NVMe format not used on " + d.Path + ": not an NVMe namespace"
}

func (z zeroingEraser) Run(_ context.Context, d Device, _ Method) error {
	if z.fail != nil {
		return z.fail
	}
	return os.WriteFile(d.Path, make([]byte, d.SizeBytes), 0o644)
}

// asBlock makes a file-backed Device look like a block device named name,
// so that the hardware erasers are asked.
func asBlock(t *testing.T, name string, size int) Device {
	d := fileDevice(t, junkFile(t, size))
	d.Name, d.Regular = name, false
	return d
}

func TestEraseExpress(t *testing.T) {
	nvme, vda := asBlock(t, "nvme0n1", 1<<20), asBlock(t, "vda", 4<<20)
	ro := asBlock(t, "sdb", 1<<20)
	ro.ReadOnly = true
	before, _ := os.ReadFile(nvme.Path)
	opts := ExpressOptions{EraseOptions: EraseOptions{Hardware: []HardwareEraser{zeroingEraser{}}}, FallbackArg: "agent_continue_if_secure_erase_failed"}

	// A device without hardware erase: refused before anything is erased,
	// naming the device and the argument that allows the fallback.
	_, err := EraseExpress(t.Context(), []Device{nvme, vda, ro}, opts)
	if err == nil || !strings.Contains(err.Error(), vda.Path+" (NVMe format not used on "+vda.Path) || !strings.Contains(err.Error(), "agent_continue_if_secure_erase_failed=true") || strings.Contains(err.Error(), nvme.Path) {
		t.Fatalf("err = %v; want the virtio device and the fallback argument named", err)
	}
	if after, _ := os.ReadFile(nvme.Path); !bytes.Equal(before, after) {
		t.Fatal("a refused express erase erased the NVMe device")
	}

	// Hardware-erasable devices only: erased and verified; the read-only
	// one skipped and said so.
	res, err := EraseExpress(t.Context(), []Device{nvme, ro}, opts)
	if err != nil {
		t.Fatal(err)
	}
	assertAllZero(t, nvme.Path)
	if res[0].Method != MethodNVMeUserDataFormat || res[0].VerifiedSamples == 0 || !res[1].Skipped || res[1].SkipReason != "device is read-only" {
		t.Fatalf("results %+v", res)
	}

	// With the fallback the other device gets its metadata erased.
	opts.Fallback = true
	res, err = EraseExpress(t.Context(), []Device{vda}, opts)
	if err != nil || res[0].Method != MethodMetadataFallback {
		t.Fatalf("fallback: %v %+v", err, res)
	}
	b, _ := os.ReadFile(vda.Path)
	if !bytes.Equal(b[:4096], make([]byte, 4096)) || bytes.Equal(b[2<<20:2<<20+4096], make([]byte, 4096)) {
		t.Fatal("the fallback did not zero the metadata regions only")
	}

	// A hardware erase that fails fails the step unless the fallback is on.
	opts.Fallback = false
	opts.Hardware = []HardwareEraser{zeroingEraser{fail: errors.New("NVMe status 0x2")}}
	if _, err := EraseExpress(t.Context(), []Device{nvme}, opts); err == nil || !strings.Contains(err.Error(), "NVMe status 0x2") || !strings.Contains(err.Error(), "agent_continue_if_secure_erase_failed=true") {
		t.Fatalf("failing hardware erase: %v", err)
	}
}
