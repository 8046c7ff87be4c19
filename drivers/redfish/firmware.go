package redfish

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/bmedge/bmedge/drivers"
)

var _ drivers.FirmwareBMC = (*BMC)(nil)

// Firmware update, as Ironic's redfish firmware interface: for each
// setting in order, the image goes to the BMC through UpdateService
// (SimpleUpdate with the image's URL when the BMC offers it, else a
// multipart push of the image the driver downloads), the driver waits
// for the BMC's task, performs the reset the component needs (a BMC
// reset for bmc, a system reset for bios and nic: the system is
// restarted when on, or started and stopped again when off), and reads
// the version back: a version that did not change fails the update.
// A checksum, when given, is verified on the image before the BMC gets
// it (streamed for SimpleUpdate: the BMC fetches the same URL, which the
// edge agent serves from its immutable cache).

type serviceRootDoc struct {
	UpdateService link `json:"UpdateService"`
	Registries    link `json:"Registries"`
}

type updateServiceDoc struct {
	FirmwareInventory    link   `json:"FirmwareInventory"`
	MultipartHTTPPushURI string `json:"MultipartHttpPushUri"`
	Actions              struct {
		SimpleUpdate *struct {
			Target string `json:"target"`
		} `json:"#UpdateService.SimpleUpdate"`
	} `json:"Actions"`
}

type collectionDoc struct {
	Members []link `json:"Members"`
}

type softwareDoc struct {
	ODataID     string `json:"@odata.id"`
	ID          string `json:"Id"`
	Name        string `json:"Name"`
	Description string `json:"Description"`
	Version     string `json:"Version"`
	RelatedItem []link `json:"RelatedItem"`
}

type taskDoc struct {
	ID        string `json:"Id"`
	TaskState string `json:"TaskState"`
	Messages  []struct {
		MessageID string `json:"MessageId"`
		Message   string `json:"Message"`
	} `json:"Messages"`
}

// inventoryEntry is a firmware inventory member and the component it is.
type inventoryEntry struct {
	doc       softwareDoc
	component string
}

func (b *BMC) updateService(c *gofish.APIClient) (*updateServiceDoc, error) {
	var root serviceRootDoc
	if err := getJSON(c, "/redfish/v1/", &root); err != nil {
		return nil, err
	}
	if root.UpdateService.ID == "" {
		return nil, fmt.Errorf("the BMC has no UpdateService: it cannot update firmware over Redfish")
	}
	var us updateServiceDoc
	if err := getJSON(c, root.UpdateService.ID, &us); err != nil {
		return nil, err
	}
	return &us, nil
}

// inventoryMembers reads the firmware inventory's members, in their
// order; a member that cannot be read is a warning.
func (b *BMC) inventoryMembers(in *inspection, us *updateServiceDoc) []softwareDoc {
	var mu sync.Mutex
	type ordered struct {
		i   int
		doc softwareDoc
	}
	var got []ordered
	in.members("firmware inventory", us.FirmwareInventory.ID, func(i int, m string) {
		var sw softwareDoc
		if in.get("firmware inventory", m, &sw) {
			mu.Lock()
			got = append(got, ordered{i, sw})
			mu.Unlock()
		}
	})
	sort.Slice(got, func(a, b int) bool { return got[a].i < got[b].i })
	out := make([]softwareDoc, 0, len(got))
	for _, g := range got {
		out = append(out, g.doc)
	}
	return out
}

// classify names each inventory member's component: bios and bmc by
// their Id or name, or by RelatedItem naming the system or its manager;
// nic:<Id> for network adapters; others are left out.
func classify(members []softwareDoc, sysURI string, mgrURIs []string) []inventoryEntry {
	var out []inventoryEntry
	for _, sw := range members {
		related := func(uris ...string) bool {
			if len(sw.RelatedItem) == 0 {
				return true
			}
			for _, r := range sw.RelatedItem {
				for _, u := range uris {
					if strings.TrimSuffix(r.ID, "/") == strings.TrimSuffix(u, "/") {
						return true
					}
				}
			}
			return false
		}
		name := strings.ToLower(sw.ID + " " + sw.Name + " " + sw.Description)
		comp := ""
		switch {
		case (strings.Contains(name, "bios") || strings.Contains(name, "system rom") && !strings.Contains(name, "redundant")) && related(sysURI):
			// iLO calls the BIOS "System ROM" (and its backup
			// "Redundant System ROM").
			comp = "bios"
		case (strings.Contains(name, "bmc") || strings.Contains(name, "manager")) && related(mgrURIs...):
			comp = "bmc"
		case (strings.Contains(name, "nic") || strings.Contains(name, "network")) && related(sysURI):
			comp = "nic:" + sw.ID
		case len(sw.RelatedItem) > 0 && len(mgrURIs) > 0 && related(mgrURIs...):
			// Named by nothing but its RelatedItem, the manager
			// (OpenBMC's "Software Inventory" of the BMC image).
			comp = "bmc"
		}
		if comp != "" {
			out = append(out, inventoryEntry{doc: sw, component: comp})
		}
	}
	return out
}

// components reads every component's version: bios from the system's
// BiosVersion and bmc from its manager's FirmwareVersion (as Ironic),
// else from the inventory; NICs from the inventory. Only the system must
// be readable: a manager or an inventory that is not costs its versions
// and is named in the warnings (URL and the BMC's answer).
func (b *BMC) components(c *gofish.APIClient) ([]drivers.FirmwareComponent, []inventoryEntry, []string, error) {
	in := &inspection{b: b, c: c}
	var sys struct {
		ODataID     string `json:"@odata.id"`
		BiosVersion string `json:"BiosVersion"`
		Links       struct {
			ManagedBy []link `json:"ManagedBy"`
		} `json:"Links"`
	}
	var uri string
	var sysErr error
	var mgrVersions []string
	var us *updateServiceDoc
	var members []softwareDoc
	// The system and its managers, and the inventory (which needs only
	// the service root), in parallel.
	parallel(
		func() {
			if uri, sysErr = b.findSystem(c); sysErr != nil {
				return
			}
			if sysErr = getJSON(c, uri, &sys); sysErr != nil {
				return
			}
			mgrVersions = make([]string, len(sys.Links.ManagedBy))
			var fns []func()
			for i, m := range sys.Links.ManagedBy {
				fns = append(fns, func() {
					var mgr struct {
						FirmwareVersion string `json:"FirmwareVersion"`
					}
					if in.get("bmc firmware", m.ID, &mgr) {
						mgrVersions[i] = mgr.FirmwareVersion
					}
				})
			}
			parallel(fns...)
		},
		func() {
			var root serviceRootDoc
			if !in.get("firmware inventory", "/redfish/v1/", &root) || root.UpdateService.ID == "" {
				return
			}
			us = &updateServiceDoc{}
			if !in.get("firmware inventory", root.UpdateService.ID, us) || us.FirmwareInventory.ID == "" {
				return
			}
			members = b.inventoryMembers(in, us)
		},
	)
	if sysErr != nil {
		return nil, nil, nil, sysErr
	}
	if in.fatal != nil {
		return nil, nil, nil, in.fatal
	}
	var mgrURIs []string
	for _, m := range sys.Links.ManagedBy {
		mgrURIs = append(mgrURIs, m.ID)
	}
	inv := classify(members, uri, mgrURIs)
	bmcVersion := ""
	for _, v := range mgrVersions {
		if bmcVersion == "" {
			bmcVersion = v
		}
	}
	versions := map[string]string{"bios": sys.BiosVersion, "bmc": bmcVersion}
	var out []drivers.FirmwareComponent
	for _, comp := range []string{"bios", "bmc"} {
		v := versions[comp]
		for _, e := range inv {
			if e.component == comp && v == "" {
				v = e.doc.Version
			}
		}
		if v != "" {
			out = append(out, drivers.FirmwareComponent{Component: comp, Version: v})
		}
	}
	for _, e := range inv {
		if strings.HasPrefix(e.component, "nic:") {
			out = append(out, drivers.FirmwareComponent{Component: e.component, Version: e.doc.Version})
		}
	}
	sort.Strings(in.warnings)
	return out, inv, in.warnings, nil
}

// FirmwareComponents reads the installed firmware versions; what could
// not be read is logged (FirmwareReading returns it).
func (b *BMC) FirmwareComponents(ctx context.Context) ([]drivers.FirmwareComponent, error) {
	out, warnings, err := b.FirmwareReading(ctx)
	for _, w := range warnings {
		b.log.Warn("redfish firmware reading is partial", "missing", w)
	}
	return out, err
}

// FirmwareReading reads the installed firmware versions and names, with
// its URL and the BMC's answer, each part that could not be read.
func (b *BMC) FirmwareReading(ctx context.Context) ([]drivers.FirmwareComponent, []string, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer b.unlock()
	if fw, w, ok := b.takeFirmware(); ok {
		return fw, w, nil
	}
	var out []drivers.FirmwareComponent
	var warnings []string
	err := b.do(ctx, "read the firmware versions", func(c *gofish.APIClient) error {
		var err error
		out, _, warnings, err = b.components(c)
		return err
	})
	return out, warnings, err
}

func versionOf(list []drivers.FirmwareComponent, comp string) (string, bool) {
	for _, c := range list {
		if c.Component == comp {
			return c.Version, true
		}
	}
	return "", false
}

// UpdateFirmware implements drivers.FirmwareBMC.
func (b *BMC) UpdateFirmware(ctx context.Context, updates []drivers.FirmwareUpdate) ([]drivers.FirmwareComponent, error) {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	for i, u := range updates {
		if err := b.updateOne(ctx, u); err != nil {
			return nil, fmt.Errorf("firmware update %d of %d (%s from %s): %w", i+1, len(updates), u.Component, redactURL(u.URL), err)
		}
		if u.Wait > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(u.Wait) * time.Second):
			}
		}
	}
	var out []drivers.FirmwareComponent
	err := b.do(ctx, "read the firmware versions", func(c *gofish.APIClient) error {
		var err error
		out, _, _, err = b.components(c)
		return err
	})
	return out, err
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.RawQuery = ""
	return u.Redacted()
}

func (b *BMC) updateOne(ctx context.Context, u drivers.FirmwareUpdate) error {
	var before string
	var us *updateServiceDoc
	var target string
	err := b.do(ctx, "read the firmware inventory", func(c *gofish.APIClient) error {
		comps, inv, _, err := b.components(c)
		if err != nil {
			return err
		}
		v, ok := versionOf(comps, u.Component)
		if !ok {
			var have []string
			for _, c := range comps {
				have = append(have, c.Component)
			}
			return fmt.Errorf("the BMC reports no firmware component %s (it reports %s)", u.Component, orNone(have))
		}
		before = v
		for _, e := range inv {
			if e.component == u.Component {
				target = e.doc.ODataID
			}
		}
		us, err = b.updateService(c)
		return err
	})
	if err != nil {
		return err
	}
	simple := us.Actions.SimpleUpdate != nil && us.Actions.SimpleUpdate.Target != ""
	if !simple && us.MultipartHTTPPushURI == "" {
		return fmt.Errorf("the BMC's UpdateService offers neither SimpleUpdate nor a MultipartHttpPushUri")
	}
	var image []byte
	if simple {
		if u.Checksum != "" {
			if err := b.fetchImage(ctx, u, io.Discard); err != nil {
				return err
			}
		}
	} else {
		var buf bytes.Buffer
		if err := b.fetchImage(ctx, u, &buf); err != nil {
			return err
		}
		image = buf.Bytes()
	}
	var taskURI string
	err = b.do(ctx, "start the firmware update", func(c *gofish.APIClient) error {
		var resp *http.Response
		var err error
		if simple {
			body := map[string]any{"ImageURI": u.URL}
			if pu, perr := url.Parse(u.URL); perr == nil {
				body["TransferProtocol"] = strings.ToUpper(pu.Scheme)
			}
			if target != "" {
				body["Targets"] = []string{target}
			}
			resp, err = c.Post(us.Actions.SimpleUpdate.Target, body)
		} else {
			params := map[string]any{"@Redfish.OperationApplyTime": "Immediate"}
			if target != "" {
				params["Targets"] = []string{target}
			}
			body, ctype, merr := multipartImage(params, u.URL, image)
			if merr != nil {
				return merr
			}
			resp, err = c.RunRawRequestWithHeaders(http.MethodPost, us.MultipartHTTPPushURI, bytes.NewReader(body), ctype, nil)
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		taskURI = resp.Header.Get("Location")
		if taskURI == "" {
			var t struct {
				ID string `json:"@odata.id"`
			}
			_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&t)
			taskURI = t.ID
		}
		return nil
	})
	if err != nil {
		return err
	}
	how := "SimpleUpdate"
	if !simple {
		how = "multipart push"
	}
	b.log.Info("redfish firmware update started", "component", u.Component, "how", how, "task", taskURI, "version", before)
	if taskURI != "" {
		if err := b.waitTask(ctx, taskURI); err != nil {
			return err
		}
	}
	switch u.Component {
	case "bmc":
		if err := b.resetBMC(ctx); err != nil {
			return fmt.Errorf("the update finished but the BMC reset that activates it failed: %w", err)
		}
	default:
		if err := b.restartSystem(ctx); err != nil {
			return fmt.Errorf("the update finished but the system reset that activates it failed: %w", err)
		}
	}
	start := time.Now()
	for {
		var comps []drivers.FirmwareComponent
		err := b.do(ctx, "read the firmware versions", func(c *gofish.APIClient) error {
			var err error
			comps, _, _, err = b.components(c)
			return err
		})
		if err != nil {
			return err
		}
		after, _ := versionOf(comps, u.Component)
		if after != before && after != "" {
			b.log.Info("redfish firmware updated", "component", u.Component, "from", before, "to", after)
			return nil
		}
		if time.Since(start) >= b.opts.FirmwareVerifyTimeout || ctx.Err() != nil {
			return fmt.Errorf("the BMC's task completed and the %s reset was done, but the component still reports version %q after %s: "+
				"the image did not apply, or it holds the version already installed; check the image and the BMC's logs",
				resetKind(u.Component), after, round(time.Since(start)))
		}
		select {
		case <-ctx.Done():
		case <-time.After(b.opts.PollInterval):
		}
	}
}

func resetKind(comp string) string {
	if comp == "bmc" {
		return "BMC"
	}
	return "system"
}

// restartSystem starts the system's firmware once, so that staged BIOS
// or NIC firmware activates, and leaves the power as it was.
func (b *BMC) restartSystem(ctx context.Context) error {
	sys, err := b.readSystem(ctx, "read the power state")
	if err != nil {
		return err
	}
	if sys.PowerState == schemas.OnPowerState {
		if err := b.reset(ctx, schemas.ForceRestartResetType); err != nil {
			return err
		}
		return b.waitPower(ctx, schemas.OnPowerState, "ForceRestart", b.opts.PowerTimeout)
	}
	if err := b.reset(ctx, schemas.OnResetType); err != nil {
		return err
	}
	if err := b.waitPower(ctx, schemas.OnPowerState, "On", b.opts.PowerTimeout); err != nil {
		return err
	}
	if err := b.reset(ctx, schemas.ForceOffResetType); err != nil {
		return err
	}
	return b.waitPower(ctx, schemas.OffPowerState, "ForceOff", b.opts.PowerTimeout)
}

// waitTask polls a task until it ends; Exception, Killed, Cancelled or
// Interrupted fail with the task's messages.
func (b *BMC) waitTask(ctx context.Context, uri string) error {
	start := time.Now()
	pause := min(250*time.Millisecond, b.opts.PollInterval)
	last := ""
	for {
		var t taskDoc
		err := b.do(ctx, "read the update task", func(c *gofish.APIClient) error {
			return getJSON(c, uri, &t)
		})
		if err != nil {
			return err
		}
		var msgs []string
		for _, m := range t.Messages {
			msgs = append(msgs, m.Message)
		}
		last = t.TaskState
		switch t.TaskState {
		case "Completed":
			b.log.Info("redfish update task completed", "task", uri, "took", round(time.Since(start)))
			return nil
		case "Exception", "Killed", "Cancelled", "Interrupted":
			return fmt.Errorf("the BMC's update task %s ended %s: %s", uri, t.TaskState, orNone(msgs))
		case "":
			// A task monitor that answers with something that is not a
			// task: the operation is done.
			return nil
		}
		if time.Since(start) > b.opts.FirmwareTimeout {
			return fmt.Errorf("the BMC's update task %s did not end within %s; it last reported %s", uri, b.opts.FirmwareTimeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the BMC's update task %s did not end within %s, the time left for this operation; it last reported %s", uri, round(time.Since(start)), last)
		case <-time.After(pause):
		}
		pause = min(2*pause, b.opts.PollInterval)
	}
}

// fetchImage downloads an image into w, bounded by MaxFirmwareBytes,
// and verifies its checksum when one is given.
func (b *BMC) fetchImage(ctx context.Context, u drivers.FirmwareUpdate, w io.Writer) error {
	var h hash.Hash
	var want string
	if u.Checksum != "" {
		algo, digest, err := drivers.SplitChecksum(u.Checksum)
		if err != nil {
			return err
		}
		want = digest
		h = map[string]func() hash.Hash{"md5": md5.New, "sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New}[algo]()
		w = io.MultiWriter(w, h)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
	if err != nil {
		return fmt.Errorf("the image URL does not parse: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("download the image: %v", strings.ReplaceAll(err.Error(), u.URL, redactURL(u.URL)))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download the image: HTTP %s", resp.Status)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, b.opts.MaxFirmwareBytes+1))
	if err != nil {
		return fmt.Errorf("download the image: %v", err)
	}
	if n > b.opts.MaxFirmwareBytes {
		return fmt.Errorf("the image is larger than %d bytes, the most this driver downloads", b.opts.MaxFirmwareBytes)
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("the image's checksum is %s, not the %s given: the image was not given to the BMC", got, want)
		}
	}
	return nil
}

// multipartImage builds a Redfish multipart push body: an UpdateParameters
// JSON part and an UpdateFile file part named after the image's URL.
func multipartImage(params map[string]any, imageURL string, image []byte) ([]byte, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := make(textproto.MIMEHeader)
	h.Set("Content-Disposition", `form-data; name="UpdateParameters"`)
	h.Set("Content-Type", "application/json")
	pw, err := mw.CreatePart(h)
	if err != nil {
		return nil, "", err
	}
	if err := json.NewEncoder(pw).Encode(params); err != nil {
		return nil, "", err
	}
	name := "firmware.bin"
	if pu, err := url.Parse(imageURL); err == nil && path.Base(pu.Path) != "/" && path.Base(pu.Path) != "." {
		name = path.Base(pu.Path)
	}
	h = make(textproto.MIMEHeader)
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="UpdateFile"; filename=%q`, name))
	h.Set("Content-Type", "application/octet-stream")
	fw, err := mw.CreatePart(h)
	if err != nil {
		return nil, "", err
	}
	if _, err := fw.Write(image); err != nil {
		return nil, "", err
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}
