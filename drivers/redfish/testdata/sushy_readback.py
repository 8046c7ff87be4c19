"""Read firmware, RAID volumes and BIOS settings back from a Redfish BMC
with Debian's python3-sushy, an independent client, and print them as
one JSON object for the Go test (oob_test.go) to compare.

Usage: /usr/bin/python3 sushy_readback.py URL USERNAME PASSWORD
"""
import json
import logging
import os
import sys

import sushy
from sushy import auth as sushy_auth
from sushy import main as sushy_main

# Debian's python3-sushy ships without the standard_registries directory
# that sushy lists before it reads a BMC's own registries; the BIOS
# attribute registry is the BMC's own, so go on without the standard ones.
if not os.path.isdir(os.path.join(os.path.dirname(sushy_main.__file__), "standard_registries")):
    sushy_main.Sushy._get_standard_message_registry_collection = lambda self: []

url, username, password = sys.argv[1:4]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def plain(v):
    return getattr(v, "value", v)


session = sushy_auth.SessionAuth(username, password)
root = sushy.Sushy(url, auth=session)
system = root.get_system()
manager = root.get_manager()
out = {
    "bios_version": system.bios_version,
    "bmc_version": manager.firmware_version,
    "inventory": {},
    "volumes": [],
    "bios": {},
    "registry": {},
}
inventory = root.get_update_service().firmware_inventory
for item in inventory.get_members():
    out["inventory"][item.identity] = item.version
for storage in system.storage.get_members():
    for vol in storage.volumes.get_members():
        out["volumes"].append({
            "id": vol.identity,
            "raid_type": plain(vol.raid_type),
            "capacity_bytes": vol.capacity_bytes,
            "controller": storage.identity,
        })
bios = system.bios
out["bios"] = dict(bios.attributes)
registry = bios.get_attribute_registry()
if registry is None:
    raise SystemExit("sushy found no BIOS attribute registry")
for a in registry.registry_entries.attributes:
    out["registry"][a.name] = {
        "type": a.attribute_type,
        "read_only": a.read_only,
        "reset_required": a.reset_required,
        "unique": a.unique,
        "lower_bound": a.lower_bound,
        "upper_bound": a.upper_bound,
        "allowable_values": [v.get("ValueName") for v in (a.allowable_values or [])],
    }
session.close()
print(json.dumps(out, sort_keys=True))
