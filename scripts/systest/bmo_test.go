package systest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/utils"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/agent/netboot"
	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// This file makes the calls Metal3's baremetal-operator (BMO) makes for
// one host, in its order and with its bodies, through gophercloud (BMO's
// client), read from metal3-io/baremetal-operator's
// pkg/provisioner/ironic: the version choice (clients/features.go), the
// lookup by name and the create (register.go enrollNode, the interfaces
// of pkg/hardwareutils/bmc), the boot MAC's port (ironic.go
// ensurePort), configureNode's PATCH (deploy image, automated_clean,
// capabilities), manage, inspection (inspecthardware.go: capabilities and
// inspect_interface, inspect, the inventory), provide, the provisioning
// PATCH (getInstanceUpdateOpts: instance_uuid, instance_info with the
// image and its hash, force_persistent_boot_device) and the deploy with a
// config drive in its JSON form, then deprovisioning (automated_clean
// sync, deleted) and the delete; for a live-ISO host (image format
// live-iso), the provisioning PATCH of setLiveIsoUpdateOptsForNode
// (instance_info boot_iso, deploy_interface ramdisk), validateNode and a
// deploy with no config drive. No request may be refused: BMO retries a
// refused one for ever.

// bmoClient is gophercloud as BMO sets it up: noauth, the microversion
// BMO chooses from the API's maximum (clients/features.go
// ChooseMicroversion: 1.110 with deployment abort, else 1.109 health,
// else 1.95 disable_power_off).
func bmoClient(t *testing.T, c *server.Coordinator) *gophercloud.ServiceClient {
	t.Helper()
	cl, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: c.APIURL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	mvs, err := utils.GetSupportedMicroversions(context.Background(), cl)
	if err != nil {
		t.Fatalf("microversions: %v", err)
	}
	// BMO's baseline is 1.89; it asks 1.110 when the maximum is 110 or
	// more.
	if mvs.MaxMajor != 1 || mvs.MaxMinor < 110 {
		t.Fatalf("API maximum %d.%d: BMO refuses below 1.89 and asks 1.110 when offered", mvs.MaxMajor, mvs.MaxMinor)
	}
	cl.Microversion = "1.110"
	return cl
}

// bmoHost is BMO's work for one host.
type bmoHost struct {
	t    *testing.T
	cl   *gophercloud.ServiceClient
	name string
	mac  string
	uuid string
	// bootIface, raidIface, firmwareIface, inspectIface: the BMC type's
	// (pkg/hardwareutils/bmc).
	driver, bootIface, raidIface, firmwareIface string
	// biosIface, mgmtIface, powerIface, vendorIface: set by the BMC
	// types that name them (idrac: idrac-redfish).
	biosIface, mgmtIface, powerIface, vendorIface string
	driverInfo                                    map[string]any
}

func (h *bmoHost) must(what string, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("BMO's %s was refused: %v", what, err)
	}
}

func (h *bmoHost) get() *nodes.Node {
	h.t.Helper()
	n, err := nodes.Get(context.Background(), h.cl, h.uuid).Extract()
	h.must("node get", err)
	return n
}

// wait polls the node as BMO does until it rests in state.
func (h *bmoHost) wait(state nodes.ProvisionState, timeout time.Duration) *nodes.Node {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := h.get()
		if n.ProvisionState == string(state) && n.TargetProvisionState == "" {
			return n
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("node %s: %s (target %q, last_error %q) after %s; want %s", h.name, n.ProvisionState, n.TargetProvisionState, n.LastError, timeout, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *bmoHost) verb(opts nodes.ProvisionStateOpts) {
	h.t.Helper()
	h.must("provision "+string(opts.Target), nodes.ChangeProvisionState(context.Background(), h.cl, h.uuid, opts).ExtractErr())
}

func (h *bmoHost) update(what string, ops nodes.UpdateOpts) *nodes.Node {
	h.t.Helper()
	n, err := nodes.Update(context.Background(), h.cl, h.uuid, ops).Extract()
	h.must(what+" PATCH", err)
	return n
}

// register is register.go: look the node up by name (404), create it as
// enrollNode does, create the boot MAC's port, configureNode's PATCH,
// then manage.
func (h *bmoHost) register() {
	ctx := context.Background()
	if _, err := nodes.Get(ctx, h.cl, h.name).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		h.t.Fatalf("lookup of %s before its create: %v, want 404", h.name, err)
	}
	off := false
	n, err := nodes.Create(ctx, h.cl, nodes.CreateOpts{
		Driver: h.driver, BootInterface: h.bootIface, Name: h.name, DriverInfo: h.driverInfo,
		FirmwareInterface: h.firmwareIface, InspectInterface: "agent", RAIDInterface: h.raidIface,
		BIOSInterface: h.biosIface, ManagementInterface: h.mgmtIface, PowerInterface: h.powerIface, VendorInterface: h.vendorIface,
		DisablePowerOff: &off,
		Properties:      map[string]any{"capabilities": "boot_mode:uefi", "cpu_arch": "x86_64"},
	}).Extract()
	h.must("node create", err)
	h.uuid = n.UUID
	if n.Driver != h.driver || n.BootInterface != h.bootIface || n.DisablePowerOff {
		h.t.Fatalf("created node: driver %q boot_interface %q disable_power_off %v", n.Driver, n.BootInterface, n.DisablePowerOff)
	}
	// ensurePort: list by address, then create.
	pages, err := ports.List(h.cl, ports.ListOpts{Address: h.mac, Fields: []string{"node_uuid"}}).AllPages(ctx)
	h.must("port list", err)
	if l, _ := ports.ExtractPorts(pages); len(l) != 0 {
		h.t.Fatalf("port %s exists before its create: %+v", h.mac, l)
	}
	pxe := true
	_, err = ports.Create(ctx, h.cl, ports.CreateOpts{NodeUUID: h.uuid, Address: h.mac, PXEEnabled: &pxe}).Extract()
	h.must("port create", err)
	// configureNode: the deploy image (this coordinator's edge agent
	// boots its own ramdisk: BMO's are removed, as BMO does without a
	// preprovisioning image), automated_clean, capabilities.
	h.update("configureNode", nodes.UpdateOpts{
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/automated_clean", Value: true},
	})
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetManage})
	h.wait(nodes.Manageable, 90*time.Second)
}

// inspect is inspecthardware.go: capabilities and inspect_interface,
// inspect, then the inventory.
func (h *bmoHost) inspect() {
	h.update("startInspection", nodes.UpdateOpts{
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/properties/capabilities", Value: "boot_mode:uefi"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/inspect_interface", Value: "agent"},
	})
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetInspect})
	n := h.wait(nodes.Manageable, 90*time.Second)
	if n.LastError != "" {
		h.t.Fatalf("inspection: last_error %q", n.LastError)
	}
	inv, err := nodes.GetInventory(context.Background(), h.cl, h.uuid).Extract()
	h.must("inventory GET", err)
	if len(inv.Inventory.Interfaces) == 0 && len(inv.Inventory.Disks) == 0 {
		h.t.Fatalf("inventory after inspection: %+v", inv.Inventory)
	}
}

// provision is ironic.go Provision: provide, the instance PATCH, then
// deploy with the config drive.
func (h *bmoHost) provision(image, sha256 string) {
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetProvide})
	h.wait(nodes.Available, 90*time.Second)
	n := h.update("provisioning", nodes.UpdateOpts{
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_uuid", Value: "6c1e4d2a-3b5f-4e7a-9c8d-0a1b2c3d4e5f"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/capabilities", Value: map[string]string{}},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/root_device", Value: map[string]any{}},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/image_source", Value: image},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/image_disk_format", Value: "raw"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/image_os_hash_algo", Value: "sha256"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/image_os_hash_value", Value: sha256},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/driver_info/force_persistent_boot_device", Value: "Default"},
	})
	if n.InstanceUUID != "6c1e4d2a-3b5f-4e7a-9c8d-0a1b2c3d4e5f" {
		h.t.Fatalf("instance_uuid after the PATCH: %q", n.InstanceUUID)
	}
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetActive, ConfigDrive: nodes.ConfigDrive{
		MetaData:    map[string]any{"uuid": h.uuid, "metal3-namespace": "metal3", "metal3-name": "host1", "local-hostname": "host1"},
		NetworkData: map[string]any{"links": []any{}, "networks": []any{}, "services": []any{}},
		UserData:    "#cloud-config\n",
	}})
	h.wait(nodes.Active, 120*time.Second)
}

// deprovision is ironic.go Deprovision and Delete: automated_clean sync
// (unchanged here), deleted back to available, the stale instance_uuid
// check, and the delete.
func (h *bmoHost) deprovision() {
	if n := h.get(); n.AutomatedClean == nil || !*n.AutomatedClean {
		h.t.Fatalf("automated_clean is %v; BMO set it true", n.AutomatedClean)
	}
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetDeleted})
	n := h.wait(nodes.Available, 120*time.Second)
	if n.InstanceUUID != "" {
		h.t.Fatalf("instance_uuid %q after undeploy; Ironic's tear down clears it", n.InstanceUUID)
	}
	h.must("node delete", nodes.Delete(context.Background(), h.cl, h.uuid).ExtractErr())
	if _, err := nodes.Get(context.Background(), h.cl, h.uuid).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		h.t.Fatalf("node after its delete: %v, want 404", err)
	}
}

// bmoRedfishRig is a redfish-virtualmedia host (BMO's
// redfish-virtualmedia:// BMC) behind the virtual Redfish BMC, its
// ramdisk booted from the BMC's virtual CD by a real edge agent (a
// stand-in ramdisk that runs the standard steps), with a coordinator of
// one site; liveISO also gives the agent an image cache allowed to fetch
// from loopback and lets the machine boot a live ISO.
func bmoRedfishRig(t *testing.T, liveISO bool) (*bmoHost, *mediaRamdiskMachine, *agent.Agent) {
	return bmoRedfishRigISO(t, liveISO, "")
}

// bmoRedfishRigISO is bmoRedfishRig with the edge agent's ramdisk ISO at
// iso ("": a file that is no ISO, enough for virtual media).
func bmoRedfishRigISO(t *testing.T, liveISO bool, iso string) (*bmoHost, *mediaRamdiskMachine, *agent.Agent) {
	if iso == "" {
		iso = filepath.Join(t.TempDir(), "bmramdisk.iso")
		if err := os.WriteFile(iso, bytes.Repeat([]byte("ramdisk ISO "), 8192), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := &mediaRamdiskMachine{MemoryMachine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{FetchMedia: liveISO}), t: t, liveISO: liveISO, inventory: map[string]any{
		"inventory": map[string]any{
			"cpu":        map[string]any{"count": 4, "architecture": "x86_64"},
			"memory":     map[string]any{"total_bytes": int64(8) << 30, "physical_mb": 8192},
			"disks":      []any{map[string]any{"name": "/dev/vda", "size": int64(40) << 30, "rotational": false}},
			"interfaces": []any{map[string]any{"name": "eth0", "mac_address": "52:54:00:6b:3c:58", "has_carrier": true}},
		},
		"properties": map[string]any{"cpus": 4, "memory_mb": 8192, "local_gb": 39, "cpu_arch": "x86_64"},
	}}
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); m.close(); b.Close() })

	c := testrig.Coordinator(t, testrig.Options{})
	var creds agent.Credentials
	if code := testrig.NewClient(t, c).Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	cfg := agent.Config{Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: c.BrokerURL}}
	if liveISO {
		cfg.Cache = agent.ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30,
			FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	}
	ag := testrig.StartAgentConfig(t, creds, cfg)

	h := &bmoHost{t: t, cl: bmoClient(t, c), name: "metal3~host1", mac: "52:54:00:6b:3c:58",
		driver: "redfish", bootIface: "redfish-virtual-media", raidIface: "redfish", firmwareIface: "redfish",
		driverInfo: map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin",
			"redfish_system_id": "/redfish/v1/Systems/" + b.SystemIDs()[0]}}
	return h, m, ag
}

// TestBMORedfishVirtualMediaHost: a redfish-virtualmedia host through
// BMO's calls from registration to active and back to deleted. The node
// names no site: the coordinator has one.
func TestBMORedfishVirtualMediaHost(t *testing.T) {
	h, m, _ := bmoRedfishRig(t, false)
	h.register()
	h.inspect()
	h.provision("http://127.0.0.1:1/host1.raw", "b004fddf42c9888a32bf3f385b1ba84307a3cf8499944f654b992f1a519af29c")
	h.deprovision()
	if m.cdBoots() < 3 {
		t.Errorf("the machine booted the ramdisk from its virtual CD %d times; inspection, cleaning, deploy and cleaning again each boot it", m.cdBoots())
	}
}

// TestBMOIDRACVirtualMediaHost: an idrac-virtualmedia host (BMO's
// idrac-virtualmedia:// BMC: driver idrac, boot
// idrac-redfish-virtual-media, bios, management, power, raid and vendor
// idrac-redfish, firmware redfish, with the redfish driver_info) behind
// the virtual Redfish BMC, through BMO's calls from registration to
// active and back to deleted, with no request refused. The node keeps
// the driver name idrac and shows Ironic's idrac interface names; the
// edge agent boots its ramdisk from the BMC's virtual CD.
func TestBMOIDRACVirtualMediaHost(t *testing.T) {
	h, m, _ := bmoRedfishRig(t, false)
	h.name = "metal3~idrac1"
	h.driver, h.bootIface, h.raidIface, h.firmwareIface = "idrac", "idrac-redfish-virtual-media", "idrac-redfish", "redfish"
	h.biosIface, h.mgmtIface, h.powerIface, h.vendorIface = "idrac-redfish", "idrac-redfish", "idrac-redfish", "idrac-redfish"
	h.register()
	n := h.get()
	got := []string{n.Driver, n.BootInterface, n.BIOSInterface, n.ManagementInterface, n.PowerInterface, n.RAIDInterface, n.VendorInterface, n.FirmwareInterface, n.DeployInterface}
	want := []string{"idrac", "idrac-redfish-virtual-media", "idrac-redfish", "idrac-redfish", "idrac-redfish", "idrac-redfish", "idrac-redfish", "redfish", "direct"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("idrac node: driver and boot, bios, management, power, raid, vendor, firmware, deploy interfaces %v; want %v", got, want)
	}
	h.inspect()
	h.provision("http://127.0.0.1:1/host1.raw", "b004fddf42c9888a32bf3f385b1ba84307a3cf8499944f654b992f1a519af29c")
	h.deprovision()
	if m.cdBoots() < 3 {
		t.Errorf("the machine booted the ramdisk from its virtual CD %d times; inspection, cleaning, deploy and cleaning again each boot it", m.cdBoots())
	}
}

// TestBMORedfishUEFIHTTPHost: a redfish-uefihttp host (BMO's
// redfish-uefihttp:// BMC: driver redfish, boot redfish-https, raid and
// firmware redfish) behind the virtual Redfish BMC, registered, inspected,
// provided, deployed and deprovisioned through BMO's calls: every ramdisk
// boot is a UEFI HTTP boot (the BMC's boot source override UefiHttp with
// the edge agent's per-boot ISO, whose GRUB menu carries the boot's
// parameters; the ISO made here as the ramdisk build makes it, with
// grub-mkrescue) and no virtual media is inserted. No request is
// refused.
func TestBMORedfishUEFIHTTPHost(t *testing.T) {
	for _, tool := range []string{"grub-mkrescue", "xorriso"} {
		requireTool(t, tool)
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(tree, "boot", "grub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]string{"boot/grub/grub.cfg": "set timeout=0\nmenuentry bmedge {\n  linux /boot/vmlinuz console=ttyS0\n  initrd /boot/initramfs\n}\n",
		"boot/vmlinuz": "kernel", "boot/initramfs": "initramfs"} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	iso := filepath.Join(t.TempDir(), "bmramdisk.iso")
	if out, err := exec.Command("grub-mkrescue", "-o", iso, tree).CombinedOutput(); err != nil {
		t.Fatalf("grub-mkrescue: %v: %s", err, out)
	}
	h, m, _ := bmoRedfishRigISO(t, false, iso)
	h.name = "metal3~uefihttp1"
	h.bootIface = "redfish-https"
	h.register()
	if n := h.get(); n.Driver != "redfish" || n.BootInterface != "redfish-https" || n.RAIDInterface != "redfish" || n.FirmwareInterface != "redfish" {
		t.Fatalf("redfish-uefihttp node: driver %q, boot %q, raid %q, firmware %q", n.Driver, n.BootInterface, n.RAIDInterface, n.FirmwareInterface)
	}
	h.inspect()
	h.provision("http://127.0.0.1:1/host1.raw", "b004fddf42c9888a32bf3f385b1ba84307a3cf8499944f654b992f1a519af29c")
	h.deprovision()
	if m.httpBootStarts() < 3 || m.cdBoots() != 0 {
		t.Errorf("the machine booted the ramdisk by UEFI HTTP boot %d times and from its virtual CD %d times; inspection, cleaning, deploy and cleaning again each boot it by HTTP, never from the CD", m.httpBootStarts(), m.cdBoots())
	}
	if usb, _, _ := m.MediaIn(vbmc.SlotUSB); usb != "" {
		t.Errorf("a parameters medium was inserted (%s); UEFI HTTP boot carries the parameters in its ISO", usb)
	}
}

// provisionLiveISO is ironic.go Provision of a live-ISO image (BMO's
// image.DiskFormat "live-iso"): provide, setUpForProvisioning's PATCH
// (getInstanceUpdateOpts with setLiveIsoUpdateOptsForNode: instance_uuid,
// instance_info capabilities, root_device and boot_iso, deploy_interface
// ramdisk, force_persistent_boot_device; no image_source or checksum
// was set, so none is removed), validateNode (boot and deploy must
// pass), then the deploy with getConfigDrive's empty config drive (BMO
// gives a live ISO none).
func (h *bmoHost) provisionLiveISO(iso string) {
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetProvide})
	h.wait(nodes.Available, 90*time.Second)
	n := h.update("provisioning", nodes.UpdateOpts{
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_uuid", Value: "7d2f5e3b-4c6a-4f8b-8d9e-1b2c3d4e5f60"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/capabilities", Value: map[string]string{}},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/root_device", Value: map[string]any{}},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/instance_info/boot_iso", Value: iso},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/deploy_interface", Value: "ramdisk"},
		nodes.UpdateOperation{Op: nodes.AddOp, Path: "/driver_info/force_persistent_boot_device", Value: "Default"},
	})
	if n.DeployInterface != "ramdisk" || n.InstanceInfo["boot_iso"] != iso {
		h.t.Fatalf("after the PATCH: deploy_interface %q, boot_iso %v", n.DeployInterface, n.InstanceInfo["boot_iso"])
	}
	v, err := nodes.Validate(context.Background(), h.cl, h.uuid).Extract()
	h.must("validate", err)
	if !v.Boot.Result || !v.Deploy.Result {
		h.t.Fatalf("validate: boot %v (%s), deploy %v (%s); BMO fails the host", v.Boot.Result, v.Boot.Reason, v.Deploy.Result, v.Deploy.Reason)
	}
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetActive, ConfigDrive: nodes.ConfigDrive{}})
	h.wait(nodes.Active, 120*time.Second)
}

// TestBMORedfishLiveISOHost: a live-ISO host (Metal3's image format
// live-iso) behind the virtual Redfish BMC through BMO's calls:
// registered, inspected and provided as any host (the ramdisk cleans it),
// deployed with the ramdisk deploy interface: active with the ISO (from
// a loopback image server, through the site's image cache) on the
// virtual CD and booted, no ramdisk boot for the deploy; deprovisioned
// (power off, eject, automated cleaning) and deleted. No request is
// refused.
func TestBMORedfishLiveISOHost(t *testing.T) {
	live := bytes.Repeat([]byte("metal3 live ISO "), 20000)
	o := &fwOrigin{gets: map[string]int{}, files: map[string][]byte{"/live.iso": live}}
	origin := httptest.NewServer(o)
	t.Cleanup(origin.Close)
	h, m, ag := bmoRedfishRig(t, true)
	h.register()
	h.inspect()
	ramdiskBoots := m.cdBoots()
	h.provisionLiveISO(origin.URL + "/live.iso")
	url, size, sum := m.MediaIn(vbmc.SlotCD)
	want := sha256.Sum256(live)
	if !strings.HasPrefix(url, "http://"+ag.ImageCacheAddr()+"/images/") || size != int64(len(live)) || sum != hex.EncodeToString(want[:]) {
		t.Fatalf("virtual CD when active: %q, %d bytes, sha256 %s; want the live ISO (%d bytes) from the site cache", url, size, sum, len(live))
	}
	if n := h.get(); n.PowerState != "power on" || !m.PoweredOn() || m.liveISOBoots() != 1 {
		t.Fatalf("active: power_state %q, machine on %v, %d live ISO boots; want on, one", n.PowerState, m.PoweredOn(), m.liveISOBoots())
	}
	// provide's cleaning booted the ramdisk; the deploy did not.
	if got := m.cdBoots(); got != ramdiskBoots+1 {
		t.Fatalf("ramdisk boots: %d after inspection, %d when active; want one more (provide's cleaning) and none for the deploy", ramdiskBoots, got)
	}
	h.deprovision()
	if got := m.cdBoots(); got != ramdiskBoots+2 {
		t.Errorf("ramdisk boots after deprovisioning: %d; want %d (the automated cleaning)", got, ramdiskBoots+2)
	}
	if url, _, _ := m.MediaIn(vbmc.SlotCD); url != "" || m.PoweredOn() {
		t.Errorf("after deprovisioning: CD %q, powered on %v; want ejected and off", url, m.PoweredOn())
	}
}

// TestBMOIPMIHost: an ipmi host (BMO's ipmi:// BMC: boot_interface ipxe,
// raid_interface no-raid) behind ipmi_sim, a real IPMI BMC, through
// BMO's calls from registration to active and back to deleted, with no
// request refused. Its machine boots from the network as a real ipmi
// node's does (netboot_machine_test.go: a UEFI PXE firmware, then iPXE,
// with busybox's DHCP client and curl) on a site network of the test's
// own, served by a real edge agent's network boot (DHCP, TFTP, HTTP);
// the ramdisk it boots is the stand-in (the standard steps, each done at
// once). Inspection, provide's cleaning, the deploy and the undeploy's
// cleaning each boot it from the network; the deployed node runs from
// its disk.
func TestBMOIPMIHost(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	const mac = "52:54:00:6b:3c:59"
	rig := newNetbootRig(t, mac)
	sim := ipmisim.StartTest(t, ipmisim.Options{PowerOn: rig.powerOn})
	machineLog := filepath.Join(sim.Dir, "power-on.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(machineLog)
			t.Logf("the machine's log (power-on.log):\n%s\nthe BMC's chassis events: %v", b, sim.Events())
		}
	})
	c := rig.c
	h := &bmoHost{t: t, cl: bmoClient(t, c), name: "metal3~ipmi1", mac: mac,
		driver: "ipmi", bootIface: "ipxe", raidIface: "no-raid", driverInfo: sim.DriverInfo()}
	start := time.Now()
	h.register()
	n := h.get()
	if n.PowerInterface != "ipmitool" || n.ManagementInterface != "ipmitool" || n.RAIDInterface != "no-raid" || n.DeployInterface != "direct" {
		t.Fatalf("ipmi node interfaces: power %q management %q raid %q deploy %q; want Ironic's ipmitool, ipmitool, no-raid, direct",
			n.PowerInterface, n.ManagementInterface, n.RAIDInterface, n.DeployInterface)
	}
	boots := func() int {
		b, _ := os.ReadFile(machineLog)
		return bytes.Count(b, []byte("netboot machine: the kernel runs"))
	}
	h.inspect()
	if got := boots(); got != 1 {
		t.Fatalf("network boots of the ramdisk after inspection: %d, want 1", got)
	}
	h.provision("http://127.0.0.1:1/host1.raw", "b004fddf42c9888a32bf3f385b1ba84307a3cf8499944f654b992f1a519af29c")
	ch, err := sim.Chassis()
	if err != nil {
		t.Fatal(err)
	}
	if n := h.get(); n.PowerState != "power on" || !ch.Power || ch.Boot == "pxe" {
		t.Fatalf("active: power_state %q, BMC's chassis %+v; want on, booting from the disk", n.PowerState, ch)
	}
	if got := boots(); got != 3 {
		t.Fatalf("network boots of the ramdisk when active: %d, want 3 (inspection, provide's cleaning, the deploy)", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(machineLog); bytes.Contains(b, []byte("netboot machine: booting the instance from the disk")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("active, but the machine did not start from its disk")
		}
	}
	h.deprovision()
	if got := boots(); got != 4 {
		t.Errorf("network boots of the ramdisk after deprovisioning: %d, want 4 (and the undeploy's cleaning)", got)
	}
	if ch, _ := sim.Chassis(); ch.Power {
		t.Errorf("after deprovisioning the chassis is on: %+v", ch)
	}
	t.Logf("BMO's ipmi host from registration to deleted, four network boots: %.1fs", time.Since(start).Seconds())
}

// netbootRig is the network boot of one machine, TestBMOIPMIHost's: a
// site network of the test's own (labnet; the test runs isolated), the
// machine's namespace on it with its PXE MAC, the stand-in kernel and
// initramfs, a coordinator of one site and a real edge agent serving
// network boot (DHCP, TFTP, HTTP) and the site broker on it. powerOn is
// the shell command a BMC's power-on runs to start the machine
// (netbootMachinePowerOn; BM_IPMISIM_BOOT in its environment is the boot
// device: pxe boots from the network, anything else from the disk).
type netbootRig struct {
	c       *server.Coordinator
	powerOn string
}

func newNetbootRig(t *testing.T, mac string) *netbootRig {
	t.Helper()
	labnet.Need(t, "busybox", "curl", "nsenter")
	for _, f := range []string{netboot.BIOSBinary, netboot.UEFIBinary} {
		if _, err := os.Stat(filepath.Join("/usr/lib/ipxe", f)); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("Debian's ipxe package is missing (%v); run scripts/install-test-deps.sh", err)
			}
			t.Skipf("Debian's ipxe package is missing (%v)", err)
		}
	}
	dir := t.TempDir()
	kernel, initrd, script := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd"), filepath.Join(dir, "udhcpc.sh")
	for f, b := range map[string]string{kernel: "stand-in kernel", initrd: "stand-in initramfs", script: udhcpcScript} {
		if err := os.WriteFile(f, []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	site := labnet.New(t)
	machine := site.Host(mac, "")
	inv, _ := json.Marshal(map[string]any{
		"inventory": map[string]any{
			"cpu":        map[string]any{"count": 2, "architecture": "x86_64"},
			"memory":     map[string]any{"total_bytes": int64(4) << 30, "physical_mb": 4096},
			"disks":      []any{map[string]any{"name": "/dev/sda", "size": int64(20) << 30, "rotational": false}},
			"interfaces": []any{map[string]any{"name": "eth0", "mac_address": mac, "has_carrier": true}},
		},
		"properties": map[string]any{"cpus": 2, "memory_mb": 4096, "local_gb": 19, "cpu_arch": "x86_64"},
	})
	nsenter := machine.Command("true").Args
	powerOn := netbootMachinePowerOn(nsenter[:len(nsenter)-1], map[string]string{
		netbootMachineScript: script, netbootMachineKernel: kernel, netbootMachineInitrd: initrd, netbootMachineInventory: string(inv)})
	c := testrig.Coordinator(t, testrig.Options{})
	var creds agent.Credentials
	if code := testrig.NewClient(t, c).Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{SiteBroker: agent.SiteBrokerOptions{Listen: site.Addr.String() + ":1883"},
		Netboot: agent.NetbootOptions{Interface: site.Bridge, Range: "10.77.0.100-10.77.0.120", Router: site.Addr.String(), Kernel: kernel, Initrd: initrd}})
	return &netbootRig{c: c, powerOn: powerOn}
}
