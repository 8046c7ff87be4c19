# The two commands a newcomer types: `make run` and `make test`.
GO ?= go
export GOFLAGS := -buildvcs=false

.PHONY: build run run-lab bench-bmc vbmc test test-unit fuzz bench soak bench-ramdisk states-doc steps-doc cli-doc deps ramdisk clean

build:
	$(GO) build -o bin/ ./coordinator/cmd/coordinator ./agent/cmd/agent

# The coordinator with its embedded broker and Badger, plus a simulated site of 8 nodes
# with its image cache, and the image server of the walk-through's image.
# The web view's vendored browser modules (xterm.js for the node console),
# from npm by coordinator/ui/web/package-lock.json, copied into the
# coordinator's embedded static files.
ui-vendor:
	cd coordinator/ui/web && npm ci --ignore-scripts --no-audit --no-fund
	cp coordinator/ui/web/node_modules/@xterm/xterm/lib/xterm.js coordinator/ui/web/node_modules/@xterm/xterm/css/xterm.css coordinator/ui/static/vendor/

run: build
	$(GO) build -o bin/ ./scripts/imageserver
	scripts/run.sh

# A lab of real BMCs: the coordinator, a real-mode edge agent, a QEMU VM
# behind the virtual Redfish BMC (booting the ramdisk ISO from virtual
# media) and one behind ipmi_sim (README.md, "A lab of real BMCs").
run-lab: deps build ramdisk
	$(GO) build -o bin/ ./scripts/vbmc ./scripts/ipmisim
	scripts/run-lab.sh

# Installs the test dependencies (Debian packages), then runs every test.
test: deps ramdisk
	@unformatted=$$(gofmt -l agent coordinator drivers lib protocol ramdisk scripts); \
	if [ -n "$$unformatted" ]; then echo "gofmt -w these files: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	# The race-detector run, every other package, and the ramdisk's QEMU tests beside them.
	GO=$(GO) scripts/test.sh

test-unit:
	$(GO) test -count=1 -short ./...

deps:
	scripts/install-test-deps.sh

# Every Go fuzz target for FUZZTIME each, one after the other; fails naming
# any target that found a crash (docs/security.md#fuzzing).
FUZZTIME ?= 1m
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

# Many simulated nodes through a full cycle: NODES=10000 make bench;
# over many sites, each with its own edge agent: NODES=10000 SITES=1000 make bench;
# against a cluster of three coordinators (docs/cluster.md): CLUSTER=3 make bench
NODES ?= 1000
SITES ?= 1
CLUSTER ?= 0
bench: build
	$(GO) run ./scripts/bench -nodes $(NODES) -sites $(SITES) -cluster $(CLUSTER)

# 200 virtual Redfish BMCs (one process, each on its own 127.0.0.1 port), the
# coordinator and a real-mode edge agent: manage, power on, power off, and the
# MQTT messages of an idle power-sync interval (not part of make test).
BMC_NODES ?= 200
bench-bmc:
	$(GO) run ./scripts/bench-bmc -nodes $(BMC_NODES)

# A virtual Redfish BMC for a lab (see go run ./scripts/vbmc --help):
# VBMC_PASSWORD=secret make vbmc VBMC_ARGS='--systems 4'
vbmc:
	$(GO) run ./scripts/vbmc $(VBMC_ARGS)

# Deploy/undeploy cycles of many simulated nodes; the coordinator's RSS and
# data folder after each (not part of make test): CYCLES=8 NODES=1000 make soak
CYCLES ?= 8
soak:
	$(GO) run ./scripts/soak -cycles $(CYCLES) -nodes $(NODES)

# The ramdisk's erase and image write against dd on one loop device, its
# peak RSS, boot → first heartbeat in QEMU, and inspect → provide → deploy
# with and without fast track (root; builds the image first).
bench-ramdisk: ramdisk
	$(GO) run ./scripts/bench-ramdisk

states-doc:
	$(GO) run ./coordinator/fsm/gen docs/states.md

# docs/steps.md, the step catalogue, from the step declarations (drivers/).
steps-doc:
	$(GO) run ./drivers/gen docs/steps.md

# docs/cli.md from the coordinator's command tree (coordinator/cli).
cli-doc:
	$(GO) run ./coordinator/cli/gendoc docs/cli.md

ramdisk:
	scripts/build-ramdisk.sh build/ramdisk

clean:
	rm -rf bin build

# WAN_NODES simulated nodes through a full cycle over a clean WAN and an
# impaired one (500 ms RTT, 5 % loss): wall times and WAN bytes per node
# (root; not part of make test): make bench-wan
.PHONY: bench-wan
WAN_NODES ?= 50
bench-wan:
	WAN_NODES=$(WAN_NODES) GO=$(GO) scripts/bench-wan/run.sh

# The web view with UI_NODES simulated nodes over 10 sites: server time of the
# fleet page and the node list, DOMContentLoaded in headless Chromium, and the
# delay from a node's change to an open page (not part of make test): make bench-ui
.PHONY: bench-ui
UI_NODES ?= 10000
bench-ui:
	$(GO) run ./scripts/bench-ui -nodes $(UI_NODES)

# The serial console relayed by a site: CONSOLE_NODES simulated nodes behind a
# 500 ms round-trip link; the WAN an idle enabled console costs, the keystroke
# round trip, step results with every console printing (root; not part of
# make test): make bench-console
.PHONY: bench-console
CONSOLE_NODES ?= 100
bench-console:
	CONSOLE_NODES=$(CONSOLE_NODES) GO=$(GO) scripts/bench-console/run.sh
