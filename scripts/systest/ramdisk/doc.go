// Package ramdisk holds the system tests of the ramdisk under QEMU: the
// u-root image (make ramdisk) booted in VMs behind the coordinator, the
// edge agent and virtual BMCs (Redfish, IPMI, network boot), with the rig
// in scripts/systest/testrig. make test (scripts/test.sh) runs them in the
// background beside the other packages; they need root, QEMU and the built
// image, and skip without them unless BM_REQUIRE_ALL=1.
//
// The package has no code of its own outside its _test.go files, and
// nothing may import it.
package ramdisk
