package systest

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// bmoVMedia is BMO's VirtualMedia (ironic.go: its Extract of GET vmedia).
type bmoVMedia struct {
	Image      string   `json:"image"`
	Inserted   bool     `json:"inserted"`
	MediaTypes []string `json:"media_types"`
}

// dataImageStatus is ironic.go GetDataImageStatus: the node must not be
// reserved, then GET vmedia (1.93), any device inserted means attached.
func (h *bmoHost) dataImageStatus() (bool, []bmoVMedia) {
	h.t.Helper()
	if n := h.get(); n.Reservation != "" {
		h.t.Fatalf("node busy (%s) when BMO reads its data image", n.Reservation)
	}
	r := nodes.GetVirtualMedia(context.Background(), h.cl, h.uuid)
	h.must("GetVirtualMedia", r.Err)
	var l []bmoVMedia
	h.must("GetVirtualMedia's body", r.ExtractInto(&l))
	for _, v := range l {
		if v.Inserted {
			return true, l
		}
	}
	return false, l
}

// waitIdle waits until the node is unlocked (the attach or detach done).
func (h *bmoHost) waitIdle() *nodes.Node {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := h.get()
		if n.Reservation == "" {
			return n
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("node still reserved by %s", n.Reservation)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBMODataImage: Metal3's dataImage on a provisioned redfish host
// behind the virtual Redfish BMC, through BMO's calls
// (baremetalhost_controller.go handleDataImageActions, ironic.go
// AttachDataImage/DetachDataImage/GetDataImageStatus, gophercloud's
// AttachVirtualMedia, DetachVirtualMedia and GetVirtualMedia): the host
// is powered off, the status read (nothing inserted), the image attached
// to the cdrom, the status read again (inserted, the image BMO gave),
// the host powered on. The BMC's virtual CD holds the image from the
// site's cache, byte for byte. Deleting the DataImage detaches it; an
// image attached again is ejected by deprovisioning. Refusals with curl:
// a version below 1.89 (404), GET below 1.93 (404), a bad device type, a
// scheme the cache cannot fetch (400); an image_url the fetch rule refuses
// fails the attach with the rule's words and reaches no BMC.
func TestBMODataImage(t *testing.T) {
	data := bytes.Repeat([]byte("metal3 data image "), 10000)
	raw := bytes.Repeat([]byte("host image "), 5000)
	o := &fwOrigin{gets: map[string]int{}, files: map[string][]byte{"/data.iso": data, "/host1.raw": raw}}
	origin := httptest.NewServer(o)
	t.Cleanup(origin.Close)
	h, m, ag := bmoRedfishRig(t, true)
	h.register()
	h.inspect()
	h.provision(origin.URL+"/host1.raw", strings.TrimPrefix(sha256Of(raw), "sha256:"))

	// BMO powers the host off (Spec.Online false), then on: the data
	// image is handled while it is off.
	// curl, an independent client.
	curl := requireTool(t, "curl")
	call := func(version, method, path, body string) string {
		t.Helper()
		args := []string{"-sS", "-X", method, "-H", "Content-Type: application/json", "-H", "X-OpenStack-Ironic-API-Version: " + version, "-w", "\n%{http_code}"}
		if body != "" {
			args = append(args, "-d", body)
		}
		out, err := exec.Command(curl, append(args, h.cl.Endpoint+path)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v %s", err, out)
		}
		return string(out)
	}
	h.must("power off", nodes.ChangePowerState(context.Background(), h.cl, h.uuid, nodes.PowerStateOpts{Target: nodes.PowerOff}).ExtractErr())
	h.waitIdle()
	if attached, _ := h.dataImageStatus(); attached {
		t.Fatal("a data image is attached before any attach")
	}
	url := origin.URL + "/data.iso"
	// A signed URL: its query is the signature, never shown back.
	h.must("AttachVirtualMedia", nodes.AttachVirtualMedia(context.Background(), h.cl, h.uuid, nodes.AttachVirtualMediaOpts{
		DeviceType: nodes.VirtualMediaCD, ImageURL: url + "?sig=s3cr3t"}).ExtractErr())
	n := h.waitIdle()
	if n.LastError != "" {
		t.Fatalf("attach: last_error %q", n.LastError)
	}
	attached, l := h.dataImageStatus()
	if !attached {
		t.Fatalf("after the attach, GET vmedia shows nothing inserted: %+v", l)
	}
	found := false
	for _, v := range l {
		if v.Inserted && strings.HasPrefix(v.Image, url) && !strings.Contains(v.Image, "s3cr3t") && strings.Contains(strings.Join(v.MediaTypes, ","), "CD") {
			found = true
		}
	}
	if !found {
		t.Fatalf("GET vmedia %+v; want the CD inserted with the image BMO gave, without its query", l)
	}
	if raw := call("1.93", "GET", "nodes/"+h.uuid+"/vmedia", ""); strings.Contains(raw, "s3cr3t") {
		t.Fatalf("GET vmedia shows the URL's signature: %s", raw)
	}
	cd, size, sum := m.MediaIn(vbmc.SlotCD)
	if !strings.HasPrefix(cd, "http://"+ag.ImageCacheAddr()+"/images/") || size != int64(len(data)) || "sha256:"+sum != sha256Of(data) {
		t.Fatalf("virtual CD %q, %d bytes, sha256 %s; want the data image (%d bytes) from the site cache", cd, size, sum, len(data))
	}
	h.must("power on", nodes.ChangePowerState(context.Background(), h.cl, h.uuid, nodes.PowerStateOpts{Target: nodes.PowerOn}).ExtractErr())
	if n := h.waitIdle(); n.PowerState != "power on" || n.ProvisionState != "active" {
		t.Fatalf("after the power on: %s, %s", n.PowerState, n.ProvisionState)
	}

	// The DataImage is deleted: detach, then nothing inserted.
	h.must("DetachVirtualMedia", nodes.DetachVirtualMedia(context.Background(), h.cl, h.uuid, nodes.DetachVirtualMediaOpts{
		DeviceTypes: []nodes.VirtualMediaDeviceType{nodes.VirtualMediaCD}}).ExtractErr())
	h.waitIdle()
	if attached, l := h.dataImageStatus(); attached {
		t.Fatalf("after the detach, GET vmedia shows %+v", l)
	}
	if cd, _, _ := m.MediaIn(vbmc.SlotCD); cd != "" {
		t.Fatalf("after the detach the virtual CD holds %q", cd)
	}

	// Refusals, with curl.
	base := "nodes/" + h.uuid + "/vmedia"
	for _, c := range []struct{ version, method, path, body, code, says string }{
		{"1.88", "POST", base, `{"device_type":"cdrom","image_url":"` + url + `"}`, "404", "could not be found"},
		{"1.92", "GET", base, "", "404", "could not be found"},
		{"1.93", "POST", base, `{"device_type":"cd","image_url":"` + url + `"}`, "400", "'cd' is not one of ['disk', 'cdrom', 'floppy']"},
		{"1.93", "POST", base, `{"device_type":"cdrom"}`, "400", "'image_url' is a required property"},
		{"1.93", "POST", base, `{"device_type":"cdrom","image_url":"ftp://x/y.iso"}`, "400", "Unsupported or missing URL scheme: ftp"},
		{"1.93", "POST", base, `{"device_type":"cdrom","image_url":"nfs://x/y.iso"}`, "400", "http:// and https://"},
		{"1.93", "POST", base, `{"device_type":"cdrom","image_url":"` + url + `","image_download_source":"http"}`, "400", "image_download_source"},
		{"1.93", "POST", base, `{"device_type":"cdrom","image_url":"` + url + `","username":"u"}`, "400", "Additional properties are not allowed"},
		{"1.93", "DELETE", base + "?device_types=cdrom,usb", "", "400", "Invalid device type(s) usb (valid are disk, cdrom, floppy)"},
	} {
		out := call(c.version, c.method, c.path, c.body)
		if !strings.HasSuffix(strings.TrimSpace(out), c.code) || !strings.Contains(out, c.says) {
			t.Errorf("%s %s at %s (%s): %s; want %s saying %q", c.method, c.path, c.version, c.body, out, c.code, c.says)
		}
	}

	// An image_url the fetch rule refuses (a link-local address, where a
	// cloud's metadata service answers): nothing is fetched, the BMC is
	// given nothing, last_error says why.
	h.must("AttachVirtualMedia refused by the rule", nodes.AttachVirtualMedia(context.Background(), h.cl, h.uuid, nodes.AttachVirtualMediaOpts{
		DeviceType: nodes.VirtualMediaCD, ImageURL: "http://169.254.169.254/latest/data.iso"}).ExtractErr())
	if n := h.waitIdle(); !strings.Contains(n.LastError, "169.254.169.254") || !strings.Contains(n.LastError, "link-local") {
		t.Fatalf("attach of a link-local image: last_error %q; want the fetch rule's refusal", n.LastError)
	}
	if cd, _, _ := m.MediaIn(vbmc.SlotCD); cd != "" {
		t.Fatalf("the refused image reached the virtual CD: %q", cd)
	}
	if attached, l := h.dataImageStatus(); attached {
		t.Fatalf("after the refused attach, GET vmedia shows %+v", l)
	}

	// Attached again, then deprovisioned: undeploy ejects it, as Ironic's
	// clean_up_instance.
	h.must("AttachVirtualMedia again", nodes.AttachVirtualMedia(context.Background(), h.cl, h.uuid, nodes.AttachVirtualMediaOpts{
		DeviceType: nodes.VirtualMediaFloppy, ImageURL: url}).ExtractErr())
	h.waitIdle()
	if attached, l := h.dataImageStatus(); !attached {
		t.Fatalf("floppy attach: GET vmedia %+v", l)
	}
	h.verb(nodes.ProvisionStateOpts{Target: nodes.TargetDeleted})
	h.wait(nodes.Available, 120*time.Second)
	if attached, l := h.dataImageStatus(); attached {
		t.Fatalf("after undeploy GET vmedia shows %+v", l)
	}
	if hist := call("1.93", "GET", "nodes/"+h.uuid+"/history", ""); strings.Count(hist, "detached from node") < 2 {
		t.Errorf("the history does not show undeploy's detach: %s", hist)
	}
	h.must("node delete", nodes.Delete(context.Background(), h.cl, h.uuid).ExtractErr())
}
