"""Drive a vBMC with Debian's python3-sushy, an independent Redfish client.

Usage: /usr/bin/python3 sushy_check.py URL USERNAME PASSWORD IMAGE_URL

Every check prints "ok: ..."; the first failure raises and the exit code
is non-zero. The last line is "ALL OK". The Go test (sushy_test.go) also
checks the vBMC's own state after this script ends.
"""
import logging
import sys

import sushy
from sushy import auth as sushy_auth

url, username, password, image = sys.argv[1:5]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def ok(what):
    print("ok: " + what, flush=True)


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))
    ok("%s = %r" % (what, got))


# A wrong password must be refused by the session service, not silently
# degraded to something else.
try:
    sushy.Sushy(url, auth=sushy_auth.SessionAuth(username, password + "x"))
    raise AssertionError("login with a wrong password succeeded")
except sushy.exceptions.AccessError as e:
    ok("wrong password refused: %s" % str(e).splitlines()[0][:120])

session = sushy_auth.SessionAuth(username, password)
root = sushy.Sushy(url, auth=session)
if not session.get_session_key() or not session.get_session_resource_id():
    raise AssertionError("no session key or session URI after login")
ok("session %s" % session.get_session_resource_id())
expect("redfish version", root.redfish_version, "1.11.0")

# The BMC has exactly one system, so sushy may pick it itself.
system = root.get_system()
ok("system %s" % system.identity)

# Power.
system.reset_system(sushy.ResetType.ON)
system.refresh()
expect("power after On", system.power_state, sushy.PowerState.ON)

# Boot override, read back.
system.set_system_boot_options(sushy.BootSource.PXE,
                               enabled=sushy.BootSourceOverrideEnabled.ONCE,
                               mode=sushy.BootSourceOverrideMode.UEFI)
system.refresh()
expect("boot target", system.boot.target, sushy.BootSource.PXE)
expect("boot enabled", system.boot.enabled, sushy.BootSourceOverrideEnabled.ONCE)
expect("boot mode", system.boot.mode, sushy.BootSourceOverrideMode.UEFI)
if sushy.BootSource.CD not in system.get_allowed_system_boot_source_values():
    raise AssertionError("Cd is not an allowed boot source")
system.reset_system(sushy.ResetType.FORCE_RESTART)
system.refresh()
expect("boot enabled after the restart that used it", system.boot.enabled,
       sushy.BootSourceOverrideEnabled.DISABLED)
system.set_system_boot_options(sushy.BootSource.HDD,
                               enabled=sushy.BootSourceOverrideEnabled.CONTINUOUS)
system.refresh()
expect("persistent boot target", system.boot.target, sushy.BootSource.HDD)
expect("persistent boot enabled", system.boot.enabled,
       sushy.BootSourceOverrideEnabled.CONTINUOUS)

# Virtual media, found under the system's manager.
manager = system.managers[0]
cds = [vm for vm in manager.virtual_media.get_members()
       if sushy.VirtualMediaType.CD in vm.media_types]
if len(cds) != 1:
    raise AssertionError("want one CD in the manager's virtual media, got %d" % len(cds))
cd = cds[0]
cd.insert_media(image, inserted=True, write_protected=True)
cd.refresh()
expect("CD inserted", cd.inserted, True)
expect("CD image", cd.image, image)
cd.eject_media()
cd.refresh()
expect("CD inserted after eject", cd.inserted, False)

# BIOS: pending until the next reset, then applied.
bios = system.bios
before = bios.attributes["ProcVirtualization"]
bios.set_attributes({"ProcVirtualization": "Disabled", "BootDelaySeconds": 7})
bios.refresh(force=True)
expect("pending ProcVirtualization", bios.pending_attributes.get("ProcVirtualization"), "Disabled")
expect("current ProcVirtualization before the reset", bios.attributes["ProcVirtualization"], before)
system.reset_system(sushy.ResetType.FORCE_RESTART)
bios = system.bios
bios.refresh(force=True)
expect("ProcVirtualization after the reset", bios.attributes["ProcVirtualization"], "Disabled")
expect("BootDelaySeconds after the reset", bios.attributes["BootDelaySeconds"], 7)
expect("pending after the reset", bios.pending_attributes, {})
try:
    bios.set_attributes({"NoSuchAttribute": "x"})
    raise AssertionError("an unknown BIOS attribute was accepted")
except sushy.exceptions.BadRequestError:
    ok("unknown BIOS attribute refused")

# A manager reset ends every session; sushy must log in again by itself.
manager.reset_manager(sushy.ResetType.GRACEFUL_RESTART)
ok("manager reset")
system.refresh()
expect("power after the manager reset", system.power_state, sushy.PowerState.ON)

system.reset_system(sushy.ResetType.FORCE_OFF)
system.refresh()
expect("power after ForceOff", system.power_state, sushy.PowerState.OFF)

session.close()
ok("logged out")
print("ALL OK", flush=True)
