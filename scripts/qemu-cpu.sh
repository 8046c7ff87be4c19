#!/usr/bin/env bash
# The CPU time of the QEMU guests of a test run, per test.
#
#   scripts/qemu-cpu.sh OUT PREFIX &   # sample every second until killed
#   TMPDIR=PREFIX go test ... ./scripts/systest/ramdisk/
#   kill %1; scripts/qemu-cpu.sh -sum OUT
#
# Every QEMU process whose command line names a path under PREFIX (the
# tests' temporary folders: t.TempDir and the VM folders, named after the
# test or its VM prefix) is sampled each second from /proc/PID/stat
# (utime+stime, in clock ticks); -sum adds up each process's last sample
# per folder name (digits cut) and prints the QEMU processes and the CPU
# seconds. A guest that lives less than a second may be missed; the
# last second of each guest is not counted.
set -uo pipefail
if [ "${1:-}" = -sum ]; then
	hz=$(getconf CLK_TCK)
	awk -v hz="$hz" '{last[$1]=$2; lab[$1]=$3}
	END {for (p in last) {l=lab[p]; sub(/[0-9]+$/,"",l); sub(/.*\//,"",l); s[l]+=last[p]; n[l]++; tot+=last[p]}
	     for (l in s) printf "%8.1f s  %2d QEMU  %s\n", s[l]/hz, n[l], l; printf "%8.1f s  total\n", tot/hz}' "$2" | sort -rn
	exit 0
fi
out=${1:?usage: qemu-cpu.sh OUT PREFIX | qemu-cpu.sh -sum OUT}
prefix=${2:?usage: qemu-cpu.sh OUT PREFIX}
declare -A label
while true; do
	for s in /proc/[0-9]*/stat; do
		read -r line <"$s" 2>/dev/null || continue
		case "$line" in *"(qemu-system-x86"*) ;; *) continue ;; esac
		p=${s#/proc/}
		p=${p%/stat}
		if [ -z "${label[$p]:-}" ]; then
			l=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -o "$prefix/[A-Za-z0-9_]*" | head -n1)
			label[$p]=${l:-none}
		fi
		[ "${label[$p]}" = none ] && continue
		# shellcheck disable=SC2086
		set -- ${line#*) }
		echo "$p $((${12} + ${13})) ${label[$p]}"
	done >>"$out"
	sleep 1
done
