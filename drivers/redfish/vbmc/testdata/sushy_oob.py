"""Drive the vBMC's UpdateService, TaskService, Storage/Volumes and BIOS
attribute registry with Debian's python3-sushy, an independent client.

Usage: /usr/bin/python3 sushy_oob.py URL USERNAME PASSWORD GOOD_IMAGE_URL FAILING_IMAGE_URL

Every check prints "ok: ..."; the first failure raises and the exit code
is non-zero. The last line is "ALL OK".
"""
import logging
import os
import sys

import sushy
from sushy import auth as sushy_auth
from sushy import exceptions
from sushy import main as sushy_main

url, username, password, good, failing = sys.argv[1:6]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

# Debian's python3-sushy ships without the standard_registries directory
# that sushy lists before it reads a BMC's own registries.
if not os.path.isdir(os.path.join(os.path.dirname(sushy_main.__file__), "standard_registries")):
    sushy_main.Sushy._get_standard_message_registry_collection = lambda self: []


def ok(what):
    print("ok: " + what, flush=True)


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))
    ok("%s = %r" % (what, got))


session = sushy_auth.SessionAuth(username, password)
root = sushy.Sushy(url, auth=session)
system = root.get_system()
updates = root.get_update_service()
inventory = {i.identity: i for i in updates.firmware_inventory.get_members()}
expect("inventory", sorted(inventory), ["BIOS", "BMC", "NIC.Slot.1"])
expect("BIOS version before", inventory["BIOS"].version, "1.0.0")

# SimpleUpdate of the BIOS: the task completes, the version changes only
# at the next start of the system.
tm = updates.simple_update(good, targets=[inventory["BIOS"].path])
tm.wait(60)
expect("good update task", tm.get_task().task_state, sushy.TaskState.COMPLETED)
inventory["BIOS"].refresh()
expect("BIOS version before the reset", inventory["BIOS"].version, "1.0.0")
system.reset_system(sushy.ResetType.ON)
inventory["BIOS"].refresh()
expect("BIOS version after the start", inventory["BIOS"].version, "1.1.0")
system.refresh()
expect("System BiosVersion", system.bios_version, "1.1.0")

tm = updates.simple_update(failing, targets=[inventory["BIOS"].path])
tm.wait(60)
t = tm.get_task()
expect("failing update task", t.task_state, sushy.TaskState.EXCEPTION)
if "flash write error" not in t.messages[0].message:
    raise AssertionError("task message: %r" % t.messages[0].message)
ok("failing task says why: " + t.messages[0].message)

# Volumes: create a RAID1 on two drives, refuse a RAID1 on three, delete.
storage = system.storage.get_members()[0]
drives = storage.drives
expect("drives", len(drives), 4)
vol = storage.volumes.create({
    "RAIDType": "RAID1", "CapacityBytes": 10 * 2**30, "Name": "root",
    "Links": {"Drives": [{"@odata.id": drives[0].path}, {"@odata.id": drives[1].path}]}})
expect("volume RAID type", getattr(vol.raid_type, "value", vol.raid_type), "RAID1")
expect("volume size", vol.capacity_bytes, 10 * 2**30)
try:
    storage.volumes.create({"RAIDType": "RAID1", "Links": {"Drives": [{"@odata.id": d.path} for d in drives[1:]]}})
    raise AssertionError("a RAID1 over drives in use was created")
except exceptions.HTTPError as e:
    ok("RAID1 over a busy drive refused: %s" % str(e).splitlines()[0][:160])
storage.volumes.refresh()
expect("volumes", len(storage.volumes.get_members()), 1)
vol.delete()
# Fresh objects: sushy's cached collection would refresh the deleted member.
fresh = root.get_system().storage.get_members()[0]
expect("volumes after delete", len(fresh.volumes.get_members()), 0)

# The BIOS attribute registry, and a value outside its bounds refused.
bios = system.bios
registry = bios.get_attribute_registry()
attrs = {a.name: a for a in registry.registry_entries.attributes}
expect("BootDelaySeconds upper bound", attrs["BootDelaySeconds"].upper_bound, 60)
expect("SystemServiceTag read-only", attrs["SystemServiceTag"].read_only, True)
try:
    bios.set_attribute("BootDelaySeconds", 99)
    raise AssertionError("BootDelaySeconds=99 was accepted")
except exceptions.BadRequestError as e:
    ok("BootDelaySeconds=99 refused: %s" % str(e).splitlines()[0][:160])
session.close()
print("ALL OK")
