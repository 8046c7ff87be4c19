package vbmc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Firmware components a system has; each is a FirmwareInventory member.
const (
	ComponentBIOS = "bios"
	ComponentBMC  = "bmc"
	ComponentNIC  = "nic"
)

// DefaultFirmware are the versions a system starts with.
func DefaultFirmware() map[string]string {
	return map[string]string{ComponentBIOS: "1.0.0", ComponentBMC: "1.0", ComponentNIC: "20.5.13"}
}

// MaxFirmwareImage bounds an image the BMC fetches or is pushed.
const MaxFirmwareImage = 64 << 20

// FirmwareImage returns the content of a firmware image the virtual BMC
// accepts: a text header naming the component and the version it
// installs. Options (each "key=value"): "fail=<message>" makes the update
// task end in Exception with that message; "apply=never" makes the task
// complete while the version never changes (a BMC that lies).
func FirmwareImage(component, version string, options ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "VBMC-FIRMWARE\ncomponent=%s\nversion=%s\n", component, version)
	for _, o := range options {
		b.WriteString(o + "\n")
	}
	return b.Bytes()
}

type fwImage struct {
	component, version, fail string
	never                    bool
}

func parseFirmwareImage(data []byte) (fwImage, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "VBMC-FIRMWARE" {
		return fwImage{}, errors.New("the image is not a firmware image for this BMC (no VBMC-FIRMWARE header)")
	}
	var im fwImage
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "component":
			im.component = v
		case "version":
			im.version = v
		case "fail":
			im.fail = v
		case "apply":
			im.never = v == "never"
		}
	}
	if _, ok := DefaultFirmware()[im.component]; !ok || im.version == "" {
		return fwImage{}, fmt.Errorf("the image names component %q version %q; want bios, bmc or nic and a version", im.component, im.version)
	}
	return im, nil
}

// Task states, as Redfish's TaskState.
const (
	TaskRunning   = "Running"
	TaskCompleted = "Completed"
	TaskException = "Exception"
)

type task struct {
	id, state, status, message string
	percent                    int
	start, end                 time.Time
}

// TaskInfo is what a test reads back from a task.
type TaskInfo struct {
	ID, State, Message string
}

// Tasks lists the BMC's tasks, oldest first.
func (b *BMC) Tasks() []TaskInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []TaskInfo
	for _, t := range b.tasks {
		out = append(out, TaskInfo{ID: t.id, State: t.state, Message: t.message})
	}
	return out
}

// Firmware returns a system's installed and pending firmware versions.
func (b *BMC) Firmware(systemID string) (installed, pending map[string]string, err error) {
	s := b.system(systemID)
	if s == nil {
		return nil, nil, fmt.Errorf("vbmc: no system %q", systemID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	installed, pending = map[string]string{}, map[string]string{}
	for k, v := range s.fw {
		installed[k] = v
	}
	for k, v := range s.fwPending {
		pending[k] = v
	}
	return installed, pending, nil
}

// fwID is the inventory member Id of a component of a system.
func (b *BMC) fwID(s *system, comp string) string {
	id := map[string]string{ComponentBIOS: "BIOS", ComponentBMC: "BMC", ComponentNIC: "NIC.Slot.1"}[comp]
	if len(b.systems) > 1 {
		id = s.id + "." + id
	}
	return id
}

func (b *BMC) fwByID(id string) (*system, string) {
	for _, s := range b.systems {
		for comp := range DefaultFirmware() {
			if b.fwID(s, comp) == id {
				return s, comp
			}
		}
	}
	return nil, ""
}

func (b *BMC) updateService() any {
	svc := map[string]any{
		"@odata.type":          "#UpdateService.v1_8_0.UpdateService",
		"@odata.id":            root + "/UpdateService",
		"Id":                   "UpdateService",
		"Name":                 "Update Service",
		"ServiceEnabled":       true,
		"Status":               map[string]any{"State": "Enabled", "Health": "OK"},
		"FirmwareInventory":    odataID(root + "/UpdateService/FirmwareInventory"),
		"MultipartHttpPushUri": root + "/UpdateService/upload",
		"MaxImageSizeBytes":    MaxFirmwareImage,
		"Actions":              map[string]any{},
	}
	if !b.cfg.NoSimpleUpdate {
		svc["Actions"] = map[string]any{"#UpdateService.SimpleUpdate": map[string]any{
			"target": root + "/UpdateService/Actions/UpdateService.SimpleUpdate",
			"TransferProtocol@Redfish.AllowableValues": []string{"HTTP", "HTTPS"},
		}}
	}
	return svc
}

func (b *BMC) firmwareInventory() any {
	var ms []string
	for _, s := range b.systems {
		for _, comp := range []string{ComponentBIOS, ComponentBMC, ComponentNIC} {
			ms = append(ms, root+"/UpdateService/FirmwareInventory/"+b.fwID(s, comp))
		}
	}
	return collection("#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory", root+"/UpdateService/FirmwareInventory", ms)
}

func (b *BMC) firmwareItem(s *system, comp string) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.fwID(s, comp)
	names := map[string]string{ComponentBIOS: "System BIOS", ComponentBMC: "BMC firmware", ComponentNIC: "Network adapter firmware"}
	related := sysPath(s)
	if comp == ComponentBMC {
		related = mgrPath(s)
	}
	return map[string]any{
		"@odata.type": "#SoftwareInventory.v1_2_0.SoftwareInventory",
		"@odata.id":   root + "/UpdateService/FirmwareInventory/" + id,
		"Id":          id,
		"Name":        names[comp],
		"Version":     s.fw[comp],
		"Updateable":  true,
		"Status":      map[string]any{"State": "Enabled", "Health": "OK"},
		"RelatedItem": []any{odataID(related)},
	}
}

func (b *BMC) taskCollection() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ms []string
	for _, t := range b.tasks {
		ms = append(ms, root+"/TaskService/Tasks/"+t.id)
	}
	return collection("#TaskCollection.TaskCollection", "Task Collection", root+"/TaskService/Tasks", ms)
}

func (b *BMC) taskResource(t *task) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	status := "OK"
	sev := "OK"
	if t.state == TaskException {
		status, sev = "Critical", "Critical"
	}
	out := map[string]any{
		"@odata.type":     "#Task.v1_4_3.Task",
		"@odata.id":       root + "/TaskService/Tasks/" + t.id,
		"Id":              t.id,
		"Name":            "Firmware update task " + t.id,
		"TaskState":       t.state,
		"TaskStatus":      status,
		"PercentComplete": t.percent,
		"StartTime":       t.start.UTC().Format(time.RFC3339),
		"Messages":        []any{},
	}
	if t.message != "" {
		out["Messages"] = []any{map[string]any{"MessageId": "Update.1.0.UpdateInProgress", "Message": t.message, "Severity": sev}}
	}
	if !t.end.IsZero() {
		out["EndTime"] = t.end.UTC().Format(time.RFC3339)
	}
	return out
}

func (b *BMC) findTask(id string) *task {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.tasks {
		if t.id == id {
			return t
		}
	}
	return nil
}

func (b *BMC) taskService() any {
	return map[string]any{
		"@odata.type":    "#TaskService.v1_1_4.TaskService",
		"@odata.id":      root + "/TaskService",
		"Id":             "TaskService",
		"Name":           "Task Service",
		"ServiceEnabled": true,
		"Tasks":          odataID(root + "/TaskService/Tasks"),
	}
}

// targets resolves an update's Targets (inventory members) to systems
// and components; none given is fine with one system.
func (b *BMC) targets(raw any) ([]*system, []string, error) {
	list, _ := raw.([]any)
	if raw != nil && list == nil {
		return nil, nil, errors.New("Targets must be a list of FirmwareInventory member URIs")
	}
	var sys []*system
	var comps []string
	for _, v := range list {
		str, _ := v.(string)
		id := strings.TrimPrefix(str, root+"/UpdateService/FirmwareInventory/")
		s, comp := b.fwByID(id)
		if s == nil {
			return nil, nil, fmt.Errorf("the target %v is not a member of %s/UpdateService/FirmwareInventory", v, root)
		}
		sys = append(sys, s)
		comps = append(comps, comp)
	}
	if len(sys) == 0 && len(b.systems) > 1 {
		return nil, nil, errors.New("this BMC has several systems: give Targets")
	}
	return sys, comps, nil
}

func (b *BMC) simpleUpdate(w http.ResponseWriter, r *http.Request) {
	if b.cfg.NoSimpleUpdate {
		notFound(w, r)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	for k := range body {
		if k != "ImageURI" && k != "TransferProtocol" && k != "Targets" && k != "@Redfish.OperationApplyTime" {
			writeError(w, http.StatusBadRequest, "ActionParameterUnknown",
				fmt.Sprintf("The action UpdateService.SimpleUpdate was submitted with the invalid parameter %s.", k), "Correct the invalid parameter and resubmit the request if the operation failed.")
			return
		}
	}
	uri, _ := body["ImageURI"].(string)
	u, err := url.Parse(uri)
	if uri == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeError(w, http.StatusBadRequest, "ActionParameterValueFormatError",
			fmt.Sprintf("The value %v for the parameter ImageURI in the action UpdateService.SimpleUpdate is not an http or https URL.", body["ImageURI"]), "Give the image's http or https URL.")
		return
	}
	if p, ok := body["TransferProtocol"].(string); ok && !strings.EqualFold(p, u.Scheme) {
		writeError(w, http.StatusBadRequest, "ActionParameterValueConflict",
			fmt.Sprintf("The TransferProtocol %s does not match the ImageURI's scheme %s.", p, u.Scheme), "Leave TransferProtocol out or make it match.")
		return
	}
	sys, comps, err := b.targets(body["Targets"])
	if err != nil {
		writeError(w, http.StatusBadRequest, "ActionParameterValueError", err.Error()+".", "Correct Targets and resubmit the request.")
		return
	}
	t := b.startTask(func(ctx context.Context) ([]byte, error) { return fetchImage(ctx, uri) }, sys, comps)
	b.log.Info("vbmc simple update accepted", "task", t.id, "image", u.Redacted())
	b.acceptTask(w, t)
}

func (b *BMC) multipartUpdate(w http.ResponseWriter, r *http.Request) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		writeError(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType",
			"The multipart push URI takes multipart/form-data with UpdateParameters and UpdateFile parts.", "Send the image as multipart/form-data.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxFirmwareImage+1<<20)
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge",
			fmt.Sprintf("The pushed image could not be read (at most %d bytes): %v.", MaxFirmwareImage, err), "Send a smaller image.")
		return
	}
	defer r.MultipartForm.RemoveAll()
	params2 := map[string]any{}
	if p := r.MultipartForm.Value["UpdateParameters"]; len(p) > 0 {
		if err := json.Unmarshal([]byte(p[0]), &params2); err != nil {
			writeError(w, http.StatusBadRequest, "MalformedJSON", "The UpdateParameters part is not a JSON object.", "Send UpdateParameters as JSON.")
			return
		}
	} else if fh := r.MultipartForm.File["UpdateParameters"]; len(fh) > 0 {
		f, err := fh[0].Open()
		if err == nil {
			err = json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&params2)
			f.Close()
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "MalformedJSON", "The UpdateParameters part is not a JSON object.", "Send UpdateParameters as JSON.")
			return
		}
	}
	files := r.MultipartForm.File["UpdateFile"]
	if len(files) != 1 {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing", "The multipart push needs exactly one UpdateFile part.", "Send the image in an UpdateFile part.")
		return
	}
	f, err := files[0].Open()
	if err != nil {
		writeError(w, http.StatusBadRequest, "InternalError", "The UpdateFile part could not be read.", "Resubmit the request.")
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFirmwareImage+1))
	f.Close()
	if err != nil || len(data) > MaxFirmwareImage {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", "The pushed image is too large.", "Send a smaller image.")
		return
	}
	sys, comps, err := b.targets(params2["Targets"])
	if err != nil {
		writeError(w, http.StatusBadRequest, "ActionParameterValueError", err.Error()+".", "Correct Targets and resubmit the request.")
		return
	}
	t := b.startTask(func(context.Context) ([]byte, error) { return data, nil }, sys, comps)
	b.log.Info("vbmc multipart update accepted", "task", t.id, "bytes", len(data))
	b.acceptTask(w, t)
}

func (b *BMC) acceptTask(w http.ResponseWriter, t *task) {
	w.Header().Set("Location", root+"/TaskService/Tasks/"+t.id)
	writeJSON(w, http.StatusAccepted, b.taskResource(t))
}

// fetchImage downloads an image as a BMC does, bounded in size and time.
func fetchImage(ctx context.Context, uri string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("the BMC could not fetch the image: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the BMC could not fetch the image: HTTP %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxFirmwareImage+1))
	if err != nil {
		return nil, fmt.Errorf("the BMC could not fetch the image: %v", err)
	}
	if len(data) > MaxFirmwareImage {
		return nil, fmt.Errorf("the image is larger than the BMC's %d bytes", MaxFirmwareImage)
	}
	return data, nil
}

// startTask runs an update in the background: get the image, check it
// against the targets, wait UpdateDelay, then stage the version for the
// reset the component needs.
func (b *BMC) startTask(get func(context.Context) ([]byte, error), sys []*system, comps []string) *task {
	b.mu.Lock()
	b.taskSeq++
	t := &task{id: strconv.Itoa(b.taskSeq), state: TaskRunning, start: time.Now(), message: "The update is being transferred."}
	b.tasks = append(b.tasks, t)
	if len(b.tasks) > 100 {
		b.tasks = b.tasks[len(b.tasks)-100:]
	}
	b.mu.Unlock()
	end := func(state, msg string) {
		b.mu.Lock()
		t.state, t.message, t.end, t.percent = state, msg, time.Now(), 100
		b.mu.Unlock()
		b.log.Info("vbmc update task ended", "task", t.id, "state", state, "message", msg)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		data, err := get(b.ctx)
		if err != nil {
			end(TaskException, err.Error())
			return
		}
		im, err := parseFirmwareImage(data)
		if err != nil {
			end(TaskException, err.Error())
			return
		}
		if len(sys) == 0 {
			sys, comps = []*system{b.systems[0]}, []string{im.component}
		}
		for _, c := range comps {
			if c != im.component {
				end(TaskException, fmt.Sprintf("The image is for component %s, not for the target %s.", im.component, c))
				return
			}
		}
		b.mu.Lock()
		t.percent, t.message = 50, "The image is being applied."
		b.mu.Unlock()
		select {
		case <-time.After(b.cfg.UpdateDelay):
		case <-b.ctx.Done():
			return
		}
		if im.fail != "" {
			end(TaskException, "The update failed: "+im.fail)
			return
		}
		b.mu.Lock()
		for _, s := range sys {
			if !im.never {
				s.fwPending[im.component] = im.version
			}
		}
		b.mu.Unlock()
		how := "a system reset"
		if im.component == ComponentBMC {
			how = "a manager reset"
		}
		end(TaskCompleted, fmt.Sprintf("The %s image %s is staged; it is activated by %s.", im.component, im.version, how))
	}()
	return t
}

// activateFirmware installs the staged versions of the given components;
// called with b.mu held.
func activateFirmware(s *system, comps ...string) {
	for _, c := range comps {
		if v, ok := s.fwPending[c]; ok {
			s.fw[c] = v
			delete(s.fwPending, c)
		}
	}
}

func (b *BMC) firmwareVersion(s *system, comp string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return s.fw[comp]
}

func (t *task) running(b *BMC) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return t.state == TaskRunning
}
