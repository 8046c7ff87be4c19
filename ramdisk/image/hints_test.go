package image

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

const gib = 1 << 30

func TestSelectRoot(t *testing.T) {
	devs := []disk.Device{
		{Name: "nvme0n1", SizeBytes: 400 * gib, Serial: "NV-1", WWN: "eui.0025388b71b0e3a1", Model: "Samsung SSD 980"},
		{Name: "sda", SizeBytes: 1000 * gib, Rotational: true, Serial: "WD-0001", WWN: "0x5000c500a1b2c3d4", Model: "WDC WD1002F9YZ", Vendor: "ATA"},
		{Name: "sdb", SizeBytes: 120*gib + 512, Serial: "S-SMALL", Model: "INTEL SSDSC2BB12", Vendor: "ATA"},
		{Name: "sdc", SizeBytes: 2 * gib, Removable: true, Model: "USB Stick"},
		{Name: "sr0", SizeBytes: 1 * gib, VirtualMedia: true},
		{Name: "sdd", SizeBytes: 50 * gib, ReadOnly: true, Serial: "RO-1"},
		{Name: "vdb", SizeBytes: 2 * gib, Serial: "SMALL-1"},
		{Name: "sde", SizeBytes: 1 * gib, VirtualMedia: true, ParamsMedium: true},
	}
	yes, no := true, false
	cases := []struct {
		name    string
		hints   RootDeviceHints
		want    string
		wantErr string
	}{
		{name: "no hints: smallest >= 4 GiB, skipping read-only and virtual", want: "sdb"},
		{name: "size exact", hints: RootDeviceHints{Size: "400"}, want: "nvme0n1"},
		{name: "size ==", hints: RootDeviceHints{Size: "== 120"}, want: "sdb"},
		{name: "size >= picks first in order", hints: RootDeviceHints{Size: ">= 300"}, want: "nvme0n1"},
		{name: "size > and rotational", hints: RootDeviceHints{Size: ">300", Rotational: &yes}, want: "sda"},
		{name: "size <", hints: RootDeviceHints{Size: "< 200"}, want: "sdb"},
		{name: "size <or>", hints: RootDeviceHints{Size: "<or> 5 <or> 1000"}, want: "sda"},
		{name: "serial, case-insensitive", hints: RootDeviceHints{Serial: "wd-0001"}, want: "sda"},
		{name: "name without /dev", hints: RootDeviceHints{Name: "sdb"}, want: "sdb"},
		{name: "name with /dev", hints: RootDeviceHints{Name: "/dev/nvme0n1"}, want: "nvme0n1"},
		{name: "wwn", hints: RootDeviceHints{WWN: "0x5000C500A1B2C3D4"}, want: "sda"},
		{name: "model <in>", hints: RootDeviceHints{Model: "<in> intel"}, want: "sdb"},
		{name: "vendor s== and not rotational", hints: RootDeviceHints{Vendor: "s== ATA", Rotational: &no}, want: "sdb"},
		{name: "serial <or>", hints: RootDeviceHints{Serial: "<or> nope <or> NV-1"}, want: "nvme0n1"},
		{name: "hints may pick a disk under 4 GiB", hints: RootDeviceHints{Name: "vdb"}, want: "vdb"},
		{name: "removable never chosen", hints: RootDeviceHints{Name: "sdc"}, wantErr: "sdc (2 GiB, model USB Stick): removable"},
		{name: "the boot parameters medium never chosen", hints: RootDeviceHints{Name: "sde"}, wantErr: "sde (1 GiB): the boot parameters medium"},
		{name: "no match lists candidates", hints: RootDeviceHints{Serial: "missing"}, wantErr: "no device matches root device hints {serial=missing}; devices seen: nvme0n1 (400 GiB, serial NV-1"},
		{name: "read-only never chosen", hints: RootDeviceHints{Serial: "RO-1"}, wantErr: "sdd (50 GiB, serial RO-1): read-only"},
		{name: "virtual media never chosen", hints: RootDeviceHints{Name: "sr0"}, wantErr: "sr0 (1 GiB): virtual media"},
		{name: "bad size", hints: RootDeviceHints{Size: "big"}, wantErr: "not a positive integer"},
		{name: "zero size", hints: RootDeviceHints{Size: "0"}, wantErr: "not a positive integer"},
		{name: "bad operator", hints: RootDeviceHints{Model: "<regex> x"}, wantErr: "unsupported operator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SelectRoot(devs, c.hints)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != c.want {
				t.Fatalf("chose %s, want %s", got.Name, c.want)
			}
		})
	}

	// Nothing suitable without hints: the error explains each device.
	_, err := SelectRoot([]disk.Device{devs[3], devs[4]}, RootDeviceHints{})
	if err == nil || !strings.Contains(err.Error(), "sdc (2 GiB, model USB Stick): removable") || !strings.Contains(err.Error(), "sr0 (1 GiB): virtual media") {
		t.Fatalf("err = %v", err)
	}
	if _, err := SelectRoot(nil, RootDeviceHints{}); err == nil || !strings.Contains(err.Error(), "no block devices were found") {
		t.Fatalf("no devices: err = %v", err)
	}
}
