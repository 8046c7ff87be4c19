#!/usr/bin/env bash
# make run-lab: a lab of real BMCs driving QEMU VMs, until Ctrl-C.
#   - the coordinator (embedded broker, Badger under build/lab/data), on loopback;
#   - site "lab" with an edge agent in real mode (no simulation), which serves
#     the ramdisk ISO and each boot's parameters to the BMCs (virtual media);
#   - node rf1: a QEMU VM behind the virtual Redfish BMC (scripts/vbmc, https with
#     a lab CA), which boots the real ramdisk from virtual media: every verb works;
#   - node ipmi1: a QEMU VM behind ipmi_sim (Debian's openipmi), which the agent
#     drives over IPMI: manage, power, boot device (the ramdisk needs network boot,
#     which the edge agent does not serve yet).
# No KVM needed (QEMU runs in TCG emulation: a ramdisk boot takes ~20 s).
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=build/lab
API=${API:-127.0.0.1:6385}
MQTT_PORT=${MQTT_PORT:-1884}
MEDIA=${MEDIA:-127.0.0.1:8081}
REDFISH=${REDFISH:-127.0.0.1:8443}
ISO=build/ramdisk/bmramdisk.iso
mkdir -p "$LAB"
# Keys, passwords and disks stay private to this user.
umask 077

for tool in qemu-system-x86_64 ipmi_sim ipmitool curl; do
  command -v "$tool" >/dev/null || { echo "run-lab: $tool is missing; run scripts/install-test-deps.sh (make test does) and make ramdisk"; exit 1; }
done
[ -s "$ISO" ] || { echo "run-lab: $ISO is missing; run make ramdisk"; exit 1; }

pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; state is kept in $LAB (delete it to start afresh)"
}
trap cleanup EXIT INT TERM

started() { # name pid log: fail with the log if the process died
  sleep 0.5
  kill -0 "$2" 2>/dev/null || { echo "run-lab: $1 did not start:"; tail -20 "$3"; exit 1; }
}

# A lab CA and a certificate for the vBMC (and for anyone who wants TLS).
if [ ! -s "$LAB/certs/ca.pem" ]; then
  bin/coordinator certs --dir "$LAB/certs" --host 127.0.0.1 --host localhost >/dev/null
fi
# One BMC password for the lab, made once.
if [ ! -s "$LAB/bmc-password" ]; then
  head -c 12 /dev/urandom | base64 | tr -d '/+=' >"$LAB/bmc-password"
fi
BMC_PASSWORD=$(cat "$LAB/bmc-password")
# Sparse disks: 4 GiB (the smallest root disk by default) for rf1, 1 GiB for ipmi1.
[ -f "$LAB/rf1.raw" ] || truncate -s 4G "$LAB/rf1.raw"
[ -f "$LAB/ipmi1.raw" ] || truncate -s 1G "$LAB/ipmi1.raw"

bin/coordinator serve --data-dir "$LAB/data" --api-listen "$API" --mqtt-listen "127.0.0.1:$MQTT_PORT" >"$LAB/coordinator.log" 2>&1 &
pids+=($!)
export COORDINATOR_URL="http://$API"
for _ in $(seq 1 100); do
  bin/coordinator site list >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "run-lab: the coordinator did not start:"; tail -20 "$LAB/coordinator.log"; exit 1; }
  sleep 0.1
done
if [ ! -s "$LAB/lab.json" ]; then
  bin/coordinator site add lab --credentials-file "$LAB/lab.json" >/dev/null
fi

# The edge agent: real BMCs only; the VMs reach the host's loopback as 10.0.2.2.
bin/agent --credentials-file "$LAB/lab.json" --ramdisk-iso "$ISO" --media-listen "$MEDIA" \
  --ramdisk-broker-url "mqtt://10.0.2.2:$MQTT_PORT" --power-sync-interval 20s >"$LAB/agent.log" 2>&1 &
pids+=($!)
started "the edge agent" "$!" "$LAB/agent.log"

# The virtual Redfish BMC with its QEMU VM (1 CPU, 1 GiB, SeaBIOS).
VBMC_PASSWORD=$BMC_PASSWORD bin/vbmc --listen "$REDFISH" --tls-cert "$LAB/certs/server.pem" --tls-key "$LAB/certs/server-key.pem" \
  --qemu-disk "$LAB/rf1.raw" --qemu-disk-serial RF1DISK --memory-mb 1024 --boot-mode Legacy \
  --console "$LAB/rf1-console.log" --dir "$LAB/vbmc" >"$LAB/vbmc.log" 2>&1 &
pids+=($!)
started "the virtual Redfish BMC" "$!" "$LAB/vbmc.log"

# ipmi_sim with a chassis that starts and kills the second VM.
QEMU_IPMI="exec qemu-system-x86_64 -m 512 -nographic -display none -monitor none -serial file:$PWD/$LAB/ipmi1-console.log \
 -drive file=$PWD/$LAB/ipmi1.raw,format=raw,if=virtio -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
 -boot order=\$( [ \"\$BM_IPMISIM_BOOT\" = pxe ] && echo n || echo c)"
IPMISIM_PASSWORD=$BMC_PASSWORD bin/ipmisim --info-file "$LAB/ipmi1.json" --power-on "$QEMU_IPMI" >"$LAB/ipmisim.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do [ -s "$LAB/ipmi1.json" ] && break; sleep 0.2; done
[ -s "$LAB/ipmi1.json" ] || { echo "run-lab: ipmi_sim did not start:"; tail -20 "$LAB/ipmisim.log"; exit 1; }
IPMI_PORT=$(sed -n 's/.*"ipmi_port": \([0-9]*\).*/\1/p' "$LAB/ipmi1.json")

# The two nodes (created once; the IPMI port changes at each start).
if ! bin/coordinator node show rf1 >/dev/null 2>&1; then
  bin/coordinator node create --name rf1 --driver redfish --site lab \
    --driver-info "redfish_address=https://$REDFISH" --driver-info redfish_username=admin \
    --driver-info "redfish_password=$BMC_PASSWORD" --driver-info "redfish_verify_ca=$PWD/$LAB/certs/ca.pem" >/dev/null
fi
if ! bin/coordinator node show ipmi1 >/dev/null 2>&1; then
  bin/coordinator node create --name ipmi1 --driver ipmi --site lab --driver-info ipmi_address=127.0.0.1 \
    --driver-info "ipmi_port=$IPMI_PORT" --driver-info ipmi_username=admin --driver-info "ipmi_password=$BMC_PASSWORD" >/dev/null
else
  bin/coordinator node set ipmi1 --driver-info "ipmi_port=$IPMI_PORT" >/dev/null
fi

cat <<MSG

  coordinator  API $COORDINATOR_URL   MQTT mqtt://127.0.0.1:$MQTT_PORT   data $LAB/data
  site lab     edge agent in real mode; ramdisk ISO served on http://$MEDIA
  rf1          QEMU VM behind the virtual Redfish BMC https://$REDFISH (console $LAB/rf1-console.log)
  ipmi1        QEMU VM behind ipmi_sim on 127.0.0.1:$IPMI_PORT/udp (console $LAB/ipmi1-console.log)
  logs         $LAB/*.log    BMC password in $LAB/bmc-password

  In another terminal, from this folder, try (README.md, "A lab of real BMCs"):
    export COORDINATOR_URL=$COORDINATOR_URL
    bin/coordinator node manage rf1 --wait
    bin/coordinator node inspect rf1 --wait      # boots the ramdisk ISO from virtual media
    bin/coordinator node show rf1
    bin/coordinator node provide rf1 --wait      # erases the VM's disk
    bin/coordinator node manage ipmi1 --wait
    bin/coordinator node power ipmi1 on
    ipmitool -I lanplus -C 3 -H 127.0.0.1 -p $IPMI_PORT -U admin -P "\$(cat $LAB/bmc-password)" chassis status

  Ctrl-C stops everything (the VMs too).
MSG
wait "${pids[0]}"
