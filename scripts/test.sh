#!/usr/bin/env bash
# The go test runs of `make test` (after gofmt, go vet and the ramdisk build).
#
# The ramdisk's QEMU system tests (scripts/systest/ramdisk: about 15 minutes
# of mostly one core under TCG) run in the background from the start, beside
# the race-detector run and then the other packages, instead of after them: on
# two cores that takes several minutes off the whole. Their output is printed
# when they end, last. Their timeout is sized for a busy machine: about 15
# minutes quiet, past 30 on a fresh clone at load 7-11 (issue 30), so 60 m
# (a hang still ends the run; the suite's time is not changed by it).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export BM_REQUIRE_ALL=1

ramdisk_log=$(mktemp)
trap 'rm -f "$ramdisk_log"; [ -n "${ramdisk_pid:-}" ] && kill "$ramdisk_pid" 2>/dev/null' EXIT
"$GO" test -count=1 -timeout 60m ./scripts/systest/ramdisk/ >"$ramdisk_log" 2>&1 &
ramdisk_pid=$!
echo "# ./scripts/systest/ramdisk/ (QEMU) runs in the background; its output follows at the end."

rc=0
# The engine, the broker, the MQTT link, the ramdisk session and the system
# tests (scripts/systest: the wired coordinator with its agents), under the
# race detector.
echo "# $GO test -race -count=1 -timeout 25m ./coordinator/engine/ ./lib/mqttbroker/ ./scripts/systest/ ./lib/mqttlink/ ./lib/session/"
"$GO" test -race -count=1 -timeout 25m ./coordinator/engine/ ./lib/mqttbroker/ ./scripts/systest/ ./lib/mqttlink/ ./lib/session/ || rc=1

# Everything else (the system tests ran above, the ramdisk runs beside).
others=$("$GO" list ./... | grep -v -e '/scripts/systest$' -e '/scripts/systest/ramdisk$')
echo "# $GO test -count=1 -timeout 30m (every other package)"
# shellcheck disable=SC2086
"$GO" test -count=1 -timeout 30m $others || rc=1

wait "$ramdisk_pid" || rc=1
ramdisk_pid=
echo "# $GO test -count=1 -timeout 60m ./scripts/systest/ramdisk/"
cat "$ramdisk_log"
exit $rc
