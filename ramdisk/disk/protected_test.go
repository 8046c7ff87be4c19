package disk

import (
	"context"
	"strings"
	"testing"
)

// TestProtected: the devices nothing may ever be written to, from sysfs:
// a removable USB stick that is neither read-only nor named "virtual", a
// read-only one, a CD, and the boot parameters medium, which the ramdisk
// marks by its device number whatever its flags say. A fixed disk is not
// protected.
func TestProtected(t *testing.T) {
	root := fakeSys(t, map[string]string{
		"block/sda/size":         "8388608\n",
		"block/sda/dev":          "8:0\n",
		"block/sda/removable":    "0\n",
		"block/sdb/size":         "8388608\n",
		"block/sdb/dev":          "8:16\n",
		"block/sdb/removable":    "1\n",
		"block/sdb/device/model": "QEMU HARDDISK\n",
		"block/sdc/size":         "88\n",
		"block/sdc/dev":          "8:32\n",
		"block/sdc/ro":           "1\n",
		"block/sdc/removable":    "1\n",
		"block/sr0/size":         "88\n",
		"block/sr0/dev":          "11:0\n",
		"block/sr0/device/type":  "5\n",
		// A parameters medium a BMC presents as a fixed, writable disk.
		"block/sdd/size":      "88\n",
		"block/sdd/dev":       "8:48\n",
		"block/sdd/removable": "0\n",
	})
	list := func() map[string]Device {
		devs, err := List(ListOptions{SysRoot: root, DevRoot: "/dev"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]Device{}
		for _, d := range devs {
			m[d.Name] = d
		}
		return m
	}
	if d := list()["sdd"]; d.Protected() != "" || d.ParamsMedium {
		t.Fatalf("sdd before it is marked: %q %+v", d.Protected(), d)
	}
	MarkParamsMedium("8:48")
	MarkParamsMedium("") // no device number: nothing is marked
	devs := list()
	for name, want := range map[string]string{
		"sda": "",
		"sdb": "removable",
		"sdc": "read-only",
		"sr0": "virtual media",
		"sdd": "the boot parameters medium",
	} {
		if got := devs[name].Protected(); got != want {
			t.Errorf("%s: Protected() = %q, want %q", name, got, want)
		}
	}
	if d := devs["sdd"]; !d.ParamsMedium || !d.VirtualMedia {
		t.Errorf("the marked medium: %+v, want ParamsMedium and VirtualMedia", d)
	}
	// Erase and EraseMetadata skip every protected device before opening
	// it (an opener that fails the test proves it).
	opts := EraseOptions{Open: func(path string, _ OpenMode) (Target, error) {
		t.Fatalf("%s was opened", path)
		return nil, nil
	}}
	for _, name := range []string{"sdb", "sdc", "sr0", "sdd"} {
		res, err := Erase(context.Background(), devs[name], opts)
		if err != nil || !res.Skipped || !strings.HasPrefix(res.SkipReason, "device is ") {
			t.Errorf("Erase(%s) = %+v, %v; want skipped", name, res, err)
		}
		mres, err := EraseMetadata(context.Background(), devs[name], opts)
		if err != nil || len(mres) != 1 || !mres[0].Skipped {
			t.Errorf("EraseMetadata(%s) = %+v, %v; want skipped", name, mres, err)
		}
		t.Logf("%s: %s", name, res.SkipReason)
	}
}
