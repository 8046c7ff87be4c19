#!/usr/bin/env bash
# make run: the coordinator (embedded broker, Badger under build/run/data,
# --quarantine-on critical), a simulated site "site1" of 8 nodes with its
# image cache and simulated sensors (read every 10 s), and an image
# server with a small raw disk image for the walk-through, until Ctrl-C.
#
# Environment (defaults): API (127.0.0.1:6385), MQTT (127.0.0.1:1883),
# IMAGE_CACHE (127.0.0.1:6390, the site cache), IMAGE_SERVER
# (127.0.0.1:6391, the image server), RUN (build/run, the state and logs),
# BIN (bin, the programs).
set -euo pipefail
cd "$(dirname "$0")/.."
API=${API:-127.0.0.1:6385}
MQTT=${MQTT:-127.0.0.1:1883}
IMAGE_CACHE=${IMAGE_CACHE:-127.0.0.1:6390}
IMAGE_SERVER=${IMAGE_SERVER:-127.0.0.1:6391}
RUN=${RUN:-build/run}
BIN=${BIN:-bin}
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
if "$BIN"/coordinator site list >/dev/null 2>&1; then
  echo "error: a coordinator already answers at $COORDINATOR_URL (another make run?)." >&2
  echo "Stop it first, or run this one beside it with its own ports and folder:" >&2
  echo "  RUN=build/run2 API=127.0.0.1:7385 MQTT=127.0.0.1:2883 IMAGE_CACHE=127.0.0.1:7390 IMAGE_SERVER=127.0.0.1:7391 make run" >&2
  trap - EXIT INT TERM
  exit 1
fi
# The new coordinator logs to a file of its own until it is up, so that a
# failed start (the data folder in use, a port taken) shows its own error
# and leaves the running one's log alone.
starting="$RUN/coordinator.log.starting"
"$BIN"/coordinator serve --data-dir "$RUN/data" --api-listen "$API" --mqtt-listen "$MQTT" --quarantine-on critical >"$starting" 2>&1 &
pids+=($!)
up=
for i in $(seq 1 100); do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "error: the coordinator did not start:" >&2; cat "$starting" >&2; rm -f "$starting"
    pids=(); trap - EXIT INT TERM; exit 1
  fi
  if "$BIN"/coordinator site list >/dev/null 2>&1; then up=1; break; fi
  sleep 0.1
done
if [ -z "$up" ]; then
  echo "error: the coordinator did not answer at $COORDINATOR_URL within 10 s:" >&2; cat "$starting" >&2; exit 1
fi
mv "$starting" "$RUN/coordinator.log"
# site1's credentials file names the broker it was issued for: re-issue it
# when the site is unknown (a fresh data folder) or the broker moved
# (MQTT=...), or the agent would knock at the old door for ever.
creds="$RUN/site1.json"
broker="mqtt://$MQTT"
if [ ! -s "$creds" ] || ! "$BIN"/coordinator site list -f json 2>/dev/null | grep -q '"name": *"site1"'; then
  rm -f "$creds"
  "$BIN"/coordinator site add site1 --credentials-file "$creds" >/dev/null
  echo "site1: registered; its edge agent's credentials are in $creds"
elif ! grep -q "\"broker_url\": *\"$broker\"" "$creds"; then
  old=$(grep -o '"broker_url": *"[^"]*"' "$creds" | sed 's/.*: *"//; s/"$//')
  "$BIN"/coordinator site rotate site1 --credentials-file "$creds" >/dev/null
  echo "site1: its credentials named broker ${old:-none}, this run's is $broker: re-issued them (coordinator site rotate site1) into $creds"
fi

# The walk-through's image: a raw disk image made once into $RUN/images,
# served on $IMAGE_SERVER; its URL and sha256 go to $RUN/image.env.
rm -f "$RUN/image.env"
"$BIN"/imageserver --listen "$IMAGE_SERVER" --dir "$RUN/images" --make demo.raw --env-file "$RUN/image.env" >"$RUN/imageserver.log" 2>&1 &
pids+=($!)
for i in $(seq 1 100); do
  [ -s "$RUN/image.env" ] && break
  if ! kill -0 "${pids[-1]}" 2>/dev/null; then
    echo "error: the image server did not start:" >&2; cat "$RUN/imageserver.log" >&2; exit 1
  fi
  sleep 0.1
done
[ -s "$RUN/image.env" ] || { echo "error: the image server wrote no $RUN/image.env within 10 s:" >&2; cat "$RUN/imageserver.log" >&2; exit 1; }
. "$RUN/image.env"

"$BIN"/agent --credentials-file "$creds" --simulate 8 --simulate-unknown 2 --simulate-lldp --simulate-health --power-sync-interval 10s --step-duration 3s --boot-delay 1s \
  --image-cache-dir "$RUN/image-cache" --image-cache-listen "$IMAGE_CACHE" \
  --fetch-allow 127.0.0.0/8 >"$RUN/agent.log" 2>&1 &
pids+=($!)
sleep 1
cat <<MSG

  coordinator  API $COORDINATOR_URL   MQTT mqtt://$MQTT   data $RUN/data
  site1        edge agent with 8 simulated nodes and 2 machines to discover, image cache http://$IMAGE_CACHE (logs: $RUN/*.log)
  image        $IMAGE_SOURCE
               $IMAGE_CHECKSUM   (both in $RUN/image.env)

  In another terminal, from this folder, try (README.md has the whole walk-through):
    bin/coordinator node create --name n1 --driver fake --site site1
    bin/coordinator node manage n1 --wait
    bin/coordinator node inspect n1 --wait
    bin/coordinator node provide n1 --wait
    . $RUN/image.env
    bin/coordinator node set n1 --instance-info image_source=\$IMAGE_SOURCE --instance-info image_checksum=\$IMAGE_CHECKSUM
    bin/coordinator node deploy n1 --wait
    bin/coordinator node history n1
    bin/coordinator node sensors n1        # the simulated hardware (docs/remote-hands.md)

  Ironic's own client works too:
    OS_AUTH_TYPE=none OS_ENDPOINT=$COORDINATOR_URL baremetal node list

  Ctrl-C stops them all.
MSG
wait -n "${pids[@]}"
