// Package ramdisk holds the system tests of the ramdisk under QEMU: the
// u-root image (make ramdisk) booted in VMs behind the coordinator, the
// edge agent and virtual BMCs (Redfish, IPMI, network boot), with the rig
// in scripts/systest/testrig. make test (scripts/test.sh) runs them in the
// background beside the other packages; they need root, QEMU and the built
// image, and skip without them unless BM_REQUIRE_ALL=1.
//
// Every test boots its VMs in the one lab of lab_test.go (newLab: the
// coordinator and the site's edge agent; Redfish and IPMI BMCs, qemu-dev
// nodes, bare VMs, console capture). Each has its own VMs, coordinator
// and listeners, so that all but the network boot tests (the firmware's
// PXE timing) run in parallel: a guest's waits are another guest's time
// (scripts/test.sh runs the package with -parallel 3).
//
// The package has no code of its own outside its _test.go files, and
// nothing may import it.
package ramdisk
