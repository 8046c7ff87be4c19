// Package consolee2e holds the end-to-end tests of the serial console
// relayed by a site, on real parts: a coordinator (HTTP Basic) and the
// edge agent program behind a WAN link that the test can cut, a real
// BMC emulator (Debian's ipmi_sim with Serial-over-LAN, the virtual
// Redfish BMC's SSH serial console) in front of a QEMU VM that boots the
// project's kernel with drivers/consoletest's guest, and the operator's
// clients (`coordinator node console` in a pty, Debian's
// python3-websocket). docs/console.md says what they check.
//
// The tests boot VMs under TCG and wait far more than they compute: they
// run in parallel, outside the race-detector run of scripts/systest (the
// programs under test run as processes of their own or with the
// coordinator in the test's process). The package has no code outside its
// _test.go files.
package consolee2e
