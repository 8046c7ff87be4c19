"""Drive the vBMC's SecureBoot resource with Debian's python3-sushy, an
independent client, as Ironic's redfish management set_secure_boot_state
does: read SecureBootEnable, set it, read it back.

Usage: /usr/bin/python3 sushy_secureboot.py URL USERNAME PASSWORD

Every check prints "ok: ..."; the first failure raises and the exit code
is non-zero. The last line is "ALL OK".
"""
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


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))
    print("ok: %s = %r" % (what, got), flush=True)


root = sushy.Sushy(url, auth=sushy_auth.BasicAuth(username, password))
system = root.get_system()
sb = system.secure_boot
expect("SecureBootEnable at first", sb.enabled, False)
expect("SecureBootCurrentBoot at first", sb.current_boot, sushy.SECURE_BOOT_DISABLED)
expect("SecureBootMode", sb.mode, sushy.SECURE_BOOT_MODE_USER)
sb.set_enabled(True)
sb.refresh(force=True)
expect("SecureBootEnable after set_enabled(True)", sb.enabled, True)
system.reset_system(sushy.RESET_ON)
sb.refresh(force=True)
expect("SecureBootCurrentBoot after a start", sb.current_boot, sushy.SECURE_BOOT_ENABLED)
print("ALL OK")
