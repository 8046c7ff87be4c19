#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each, one after the
# other, and fails if any of them finds a crash, naming each one.
#
#   scripts/fuzz.sh                 # every target, FUZZTIME (default 1m) each
#   FUZZTIME=10m scripts/fuzz.sh    # the acceptance run
#   scripts/fuzz.sh FuzzDecode      # only targets whose name matches (grep -E)
#
# Targets are found, not listed here: every package whose tests declare a
# `func Fuzz...` is asked for its targets with `go test -list`, so a new
# target is picked up without editing this script. FUZZPARALLEL sets the
# number of fuzzing workers per target (go's default: GOMAXPROCS).
# FUZZMINIMIZETIME (default 10s) bounds the minimising of each new input:
# go's default of 60s let a target with inputs of tens of KB (FuzzQcow2)
# spend a whole 1m run minimising one input (20 executions instead of
# thousands).
# A crasher is written by go test to the package's testdata/fuzz/<Target>/;
# commit it with the fix so that plain `go test` keeps checking it.
set -uo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1m}
FUZZPARALLEL=${FUZZPARALLEL:-}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-10s}
only=${1:-.}

# go test's default -timeout (10m) covers the whole fuzzing run, so give
# it the fuzzing time plus room for building and minimising a crasher.
timeout=0
case $FUZZTIME in
*[0-9]s) timeout=$((${FUZZTIME%s} + 600))s ;;
*[0-9]m) timeout=$((${FUZZTIME%m} + 10))m ;;
*[0-9]h) timeout=$((${FUZZTIME%h} + 1))h ;;
esac

# A package can only hold fuzz targets in its _test.go files; looking for
# the declaration first saves building the test binary of every package.
mapfile -t dirs < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_]' . | xargs -r -n1 dirname | sort -u)
if [ ${#dirs[@]} -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

targets=()
for d in "${dirs[@]}"; do
	pkg=$($GO list "$d") || exit 1
	names=$($GO test -list '^Fuzz' "$d" | grep -E '^Fuzz') || {
		echo "fuzz: cannot list the fuzz targets of $pkg" >&2
		exit 1
	}
	for n in $names; do
		if echo "$n" | grep -qE -- "$only"; then
			targets+=("$d $pkg $n")
		fi
	done
done

echo "fuzz: ${#targets[@]} targets, $FUZZTIME each"
failed=()
for t in "${targets[@]}"; do
	read -r d pkg name <<<"$t"
	echo "=== $pkg $name ($FUZZTIME)"
	args=(-run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" -timeout "$timeout")
	if [ -n "$FUZZPARALLEL" ]; then
		args+=(-parallel "$FUZZPARALLEL")
	fi
	start=$(date +%s)
	if ! $GO test "${args[@]}" "$d"; then
		failed+=("$pkg $name (crasher in $d/testdata/fuzz/$name/)")
	fi
	echo "--- $pkg $name: $(($(date +%s) - start))s"
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#failed[@]} of ${#targets[@]} targets FAILED:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran $FUZZTIME without a crash"
