// Package systest holds the system tests: tests that wire the coordinator,
// the edge agent and the simulated or virtual hardware (BMCs, sites, WAN
// links) together as real processes and real listeners, with the rig in
// scripts/systest/testrig. They run under the race detector in make test
// (scripts/test.sh). The ramdisk's QEMU tests are the package of their own
// in scripts/systest/ramdisk, which make test runs in the background.
//
// Tests that wait far more than they compute (a cut WAN link, a killed
// and restarted process, BMC and fast-track timeouts) call t.Parallel:
// they run together once the others are done, each with its own
// coordinator, listeners and network namespace (scripts/test.sh runs the
// package with -parallel 4). Tests that measure the process (allocations,
// floods counted by the second) or set the environment stay serial.
//
// The package has no code of its own outside its _test.go files, and
// nothing outside _test.go files may import it or its rig (protocol's
// TestImportRule checks the rig's side).
package systest
