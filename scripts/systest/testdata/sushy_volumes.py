"""List a Redfish system's volumes with Debian's python3-sushy, an
independent client: one JSON line, a list of
{"id", "name", "raid_type", "capacity_bytes", "drives"} (drive Ids).

Usage: /usr/bin/python3 sushy_volumes.py URL USERNAME PASSWORD
"""
import json
import logging
import os
import sys

import sushy
from sushy import auth as sushy_auth
from sushy import main as sushy_main

url, username, password = sys.argv[1:4]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

# Debian's python3-sushy ships without the standard_registries directory
# that sushy lists before it reads a BMC's own registries.
if not os.path.isdir(os.path.join(os.path.dirname(sushy_main.__file__), "standard_registries")):
    sushy_main.Sushy._get_standard_message_registry_collection = lambda self: []

session = sushy_auth.SessionAuth(username, password)
root = sushy.Sushy(url, auth=session)
system = root.get_system()
out = []
for storage in system.storage.get_members():
    for vol in storage.volumes.get_members():
        links = vol.json.get("Links", {}).get("Drives", [])
        drives = [x.get("@odata.id", "").rsplit("/", 1)[-1] for x in links]
        out.append({"id": vol.identity, "name": vol.name,
                    "raid_type": getattr(vol.raid_type, "value", vol.raid_type),
                    "capacity_bytes": vol.capacity_bytes, "drives": drives})
session.close()
print(json.dumps(out))
