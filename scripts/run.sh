#!/usr/bin/env bash
# make run: the coordinator (embedded broker, Badger under build/run/data)
# and a simulated site "site1" of 8 nodes, until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
API=${API:-127.0.0.1:6385}
MQTT=${MQTT:-127.0.0.1:1883}
RUN=build/run
mkdir -p "$RUN"
pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; state is kept in $RUN/data (delete it to start afresh)"
}
trap cleanup EXIT INT TERM

export COORDINATOR_URL="http://$API"
# Another make run (or any coordinator) already answering here would take
# this one's requests, and a second edge agent of site1 would take over the
# first one's session: stop before touching anything of the running one.
if bin/coordinator site list >/dev/null 2>&1; then
  echo "error: a coordinator already answers at $COORDINATOR_URL (another make run?)." >&2
  echo "Stop it first, or run this one beside it: API=127.0.0.1:7385 MQTT=127.0.0.1:2883 make run (with its own build/run: copy the folder)." >&2
  trap - EXIT INT TERM
  exit 1
fi
# The new coordinator logs to a file of its own until it is up, so that a
# failed start (the data folder in use, a port taken) shows its own error
# and leaves the running one's log alone.
starting="$RUN/coordinator.log.starting"
bin/coordinator serve --data-dir "$RUN/data" --api-listen "$API" --mqtt-listen "$MQTT" >"$starting" 2>&1 &
pids+=($!)
up=
for i in $(seq 1 100); do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "error: the coordinator did not start:" >&2; cat "$starting" >&2; rm -f "$starting"
    pids=(); trap - EXIT INT TERM; exit 1
  fi
  if bin/coordinator site list >/dev/null 2>&1; then up=1; break; fi
  sleep 0.1
done
if [ -z "$up" ]; then
  echo "error: the coordinator did not answer at $COORDINATOR_URL within 10 s:" >&2; cat "$starting" >&2; exit 1
fi
mv "$starting" "$RUN/coordinator.log"
if [ ! -s "$RUN/site1.json" ]; then
  bin/coordinator site add site1 --credentials-file "$RUN/site1.json"
fi
bin/agent --credentials-file "$RUN/site1.json" --simulate 8 --step-duration 3s --boot-delay 1s \
  --image-cache-dir "$RUN/image-cache" --image-cache-listen "${IMAGE_CACHE:-127.0.0.1:6390}" >"$RUN/agent.log" 2>&1 &
pids+=($!)
sleep 1
cat <<MSG

  coordinator  API $COORDINATOR_URL   MQTT mqtt://$MQTT   data $RUN/data
  site1        edge agent with 8 simulated nodes (logs: $RUN/*.log)

  In another terminal, from this folder, try (README.md has the whole walk-through):
    bin/coordinator node create --name n1 --driver fake --site site1
    bin/coordinator node manage n1 --wait
    bin/coordinator node inspect n1 --wait
    bin/coordinator node provide n1 --wait
    bin/coordinator node history n1

  Ironic's own client works too:
    OS_AUTH_TYPE=none OS_ENDPOINT=$COORDINATOR_URL baremetal node list

  Ctrl-C stops both.
MSG
wait -n "${pids[@]}"
