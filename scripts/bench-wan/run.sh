#!/usr/bin/env bash
# make bench-wan: WAN_NODES (50) simulated nodes through the full cycle
# (manage, provide, deploy, undeploy) over a clean link and over an
# impaired one (500 ms round trip, 5 % loss each way), between a
# coordinator on the host and the site's edge agent in a network
# namespace of its own; prints the wall time of each and the WAN bytes per
# node per cycle (scripts/systest/wan_bench_test.go, TestWANBench).
# The simulated in-band steps take 30 s and the ramdisk boots in 20 s
# (BM_BENCH_WAN_STEP, BM_BENCH_WAN_BOOT to change them); a run takes about
# 8 minutes.
# Needs root (network namespace, veth, TUN or tc netem); not part of make
# test. Results: docs/benchmarks.md, "WAN".
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
	echo "bench-wan needs root: it makes a network namespace and a link to it" >&2
	exit 1
fi
BM_BENCH_WAN=1 BM_BENCH_WAN_NODES="${WAN_NODES:-50}" exec "${GO:-go}" test -count=1 -run '^TestWANBench$' -v -timeout 30m ./scripts/systest/
