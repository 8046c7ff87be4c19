#!/usr/bin/env bash
# The go test runs of `make test` (after gofmt, go vet and the ramdisk build).
#
# Three runs side by side from the start, each package tested once:
#   - the ramdisk's QEMU system tests (scripts/systest/ramdisk: mostly one
#     core under TCG), in the background;
#   - the race-detector run (the engine, the broker, the MQTT link, the
#     ramdisk session and the system tests of scripts/systest), in the
#     background: its tests that wait far more than they compute (cut WAN
#     links, kill -9 and restarts, timeouts) run in parallel, -parallel 4;
#   - every other package, in the foreground.
# On two cores the waits of one run are the others' time. The background
# runs' output is printed when they end, the QEMU package's last.
# Timeouts are sized for a busy machine (load 10 and more), not for speed:
# a hang still ends the run. The QEMU package took 16 minutes at load 10-16
# with its tests in parallel (22 one at a time, past 30 at load 7-11), so 60 m.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export BM_REQUIRE_ALL=1

race_pkgs=(./coordinator/engine/ ./lib/mqttbroker/ ./scripts/systest/ ./lib/mqttlink/ ./lib/session/)
ramdisk_log=$(mktemp)
race_log=$(mktemp)
ramdisk_pid=
race_pid=
trap 'rm -f "$ramdisk_log" "$race_log"; for p in $ramdisk_pid $race_pid; do kill "$p" 2>/dev/null; done' EXIT

"$GO" test -count=1 -timeout 60m -parallel 3 ./scripts/systest/ramdisk/ >"$ramdisk_log" 2>&1 &
ramdisk_pid=$!
echo "# ./scripts/systest/ramdisk/ (QEMU) runs in the background; its output follows at the end."
"$GO" test -race -count=1 -timeout 25m -parallel 4 "${race_pkgs[@]}" >"$race_log" 2>&1 &
race_pid=$!
echo "# the race-detector run (${race_pkgs[*]}) runs in the background; its output follows."

rc=0
# Everything else: the race run and the QEMU package test the rest.
others=$("$GO" list ./... | grep -v -e '/scripts/systest$' -e '/scripts/systest/ramdisk$' \
	-e '/coordinator/engine$' -e '/lib/mqttbroker$' -e '/lib/mqttlink$' -e '/lib/session$')
echo "# $GO test -count=1 -timeout 30m (every other package)"
# shellcheck disable=SC2086
"$GO" test -count=1 -timeout 30m $others || rc=1

wait "$race_pid" || rc=1
race_pid=
echo "# $GO test -race -count=1 -timeout 25m -parallel 4 ${race_pkgs[*]}"
cat "$race_log"

wait "$ramdisk_pid" || rc=1
ramdisk_pid=
echo "# $GO test -count=1 -timeout 60m -parallel 3 ./scripts/systest/ramdisk/"
cat "$ramdisk_log"
exit $rc
