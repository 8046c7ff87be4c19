"""Read a recorded BMC (drivers/redfish/recorded) with Debian's
python3-sushy, an independent client, and print what it reads as one JSON
object for the Go test (recorded_test.go) to compare with the driver's
readings. A part sushy cannot read is given as {"error": "..."}.

Usage: /usr/bin/python3 sushy_recorded.py URL USERNAME PASSWORD
"""
import json
import logging
import os
import sys

import sushy
from sushy import auth as sushy_auth
from sushy import main as sushy_main

# Debian's python3-sushy ships without the standard_registries directory.
if not os.path.isdir(os.path.join(os.path.dirname(sushy_main.__file__), "standard_registries")):
    sushy_main.Sushy._get_standard_message_registry_collection = lambda self: []

url, username, password = sys.argv[1:4]
logging.basicConfig(level=logging.CRITICAL, stream=sys.stderr)


def plain(v):
    return getattr(v, "value", v)


def attempt(f):
    try:
        return f()
    except Exception as e:  # noqa: any failure of a part is reported as such
        return {"error": "%s: %s" % (type(e).__name__, e)}


try:
    root = sushy.Sushy(url, auth=sushy_auth.SessionOrBasicAuth(username, password))
    system = root.get_system()
except sushy.exceptions.AccessError:
    # A BMC without a session service: sushy's auto mode does not fall
    # back there; Basic does.
    root = sushy.Sushy(url, auth=sushy_auth.BasicAuth(username, password))
    system = root.get_system()
out = {
    "power_state": plain(system.power_state),
    "bios_version": system.bios_version,
    "manufacturer": system.manufacturer,
    "serial_number": system.serial_number,
    "boot_mode": plain(system.boot.mode),
    "boot_target": plain(system.boot.target),
    "boot_enabled": plain(system.boot.enabled),
}
out["memory_gib"] = attempt(lambda: system.memory_summary.size_gib if system.memory_summary else None)


def processors():
    s = system.processors.summary
    return {"count": s.count, "architecture": plain(s.architecture)}


out["processors"] = attempt(processors)
out["macs"] = attempt(lambda: {k.lower(): plain(v) for k, v in system.ethernet_interfaces.summary.items()})
out["simple_storage_sizes"] = attempt(lambda: system.simple_storage.disks_sizes_bytes)
out["drive_sizes"] = attempt(lambda: system.storage.drives_sizes_bytes)


def volumes():
    vols = []
    for st in system.storage.get_members():
        for v in st.volumes.get_members():
            vols.append({"id": v.identity, "controller": st.identity, "raid_type": plain(v.raid_type),
                         "volume_type": plain(v.volume_type), "capacity_bytes": v.capacity_bytes})
    return vols


out["volumes"] = attempt(volumes)
out["secure_boot"] = attempt(lambda: system.secure_boot.enabled)
out["bios"] = attempt(lambda: dict(system.bios.attributes))


def manager_version():
    return root.get_manager(system.managers[0].path).firmware_version


out["bmc_version"] = attempt(manager_version)


def inventory():
    return {i.identity: i.version for i in root.get_update_service().firmware_inventory.get_members()}


out["inventory"] = attempt(inventory)


def media():
    found = []
    for m in system.managers:
        for vm in m.virtual_media.get_members():
            found.append({"id": vm.path, "media_types": [plain(t) for t in vm.media_types or []],
                          "inserted": vm.inserted, "image": vm.image})
    return found


out["manager_media"] = attempt(media)
print(json.dumps(out, sort_keys=True, default=str))
