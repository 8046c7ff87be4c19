#!/usr/bin/env bash
# make bench-console: the serial console relayed by a site
# (scripts/bench-console/main.go): CONSOLE_NODES (100) simulated nodes'
# consoles behind a link of 500 ms round trip; the WAN an idle enabled
# console costs, the keystroke round trip, and step results with and
# without every console printing. Needs root (network namespace); not
# part of make test. A run takes about 12 minutes. Results:
# docs/benchmarks.md, "The serial console".
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
	echo "bench-console needs root: it makes a network namespace and a link to it" >&2
	exit 1
fi
exec "${GO:-go}" run ./scripts/bench-console -nodes "${CONSOLE_NODES:-100}" "$@"
