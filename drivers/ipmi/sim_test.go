package ipmi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/app"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/protocol"
)

// The tests share one ipmi_sim per test binary (started on first use,
// stopped after the last test; ipmi_sim also dies with the binary). Tests
// that restart the BMC get their own.
var shared struct {
	once sync.Once
	sim  *ipmisim.Sim
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.sim != nil {
		shared.sim.Close()
	}
	os.Exit(code)
}

var _ drivers.BMC = (*BMC)(nil)

// requireTool skips a test whose real component is missing, unless the
// run demands every component (make test sets BM_REQUIRE_ALL=1).
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is not installed; run scripts/install-test-deps.sh", name)
		}
		t.Skipf("%s is not installed; run scripts/install-test-deps.sh (make test does)", name)
	}
}

var simUsers = []ipmisim.User{
	{Name: "admin", Password: "password", Priv: "admin"},
	{Name: "oper", Password: "operpass", Priv: "operator"},
}

// sharedSim returns the shared BMC with its chassis off, booting from
// disk, obeying soft power off, with no recorded events.
func sharedSim(t *testing.T) *ipmisim.Sim {
	t.Helper()
	requireTool(t, "ipmi_sim")
	requireTool(t, "ipmitool")
	shared.once.Do(func() { shared.sim, shared.err = ipmisim.Start(ipmisim.Options{Users: simUsers}) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	s := shared.sim
	if err := s.SetChassis(ipmisim.Chassis{Power: false, Boot: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := s.IgnoreSoftOff(false); err != nil {
		t.Fatal(err)
	}
	if err := s.Stuck(false); err != nil {
		t.Fatal(err)
	}
	s.ClearEvents()
	return s
}

func ownSim(t *testing.T) *ipmisim.Sim {
	t.Helper()
	requireTool(t, "ipmi_sim")
	requireTool(t, "ipmitool")
	return ipmisim.StartTest(t, ipmisim.Options{Users: simUsers})
}

// testOpts keeps every wait short: ipmi_sim answers in milliseconds.
func testOpts() Options {
	return Options{
		ExchangeTimeout: 200 * time.Millisecond, ExchangeRetries: 1,
		CallTimeout: 5 * time.Second, Retries: 2, Backoff: 50 * time.Millisecond,
		PowerTimeout: 3 * time.Second, PowerPoll: 50 * time.Millisecond,
		SoftPowerOffTimeout: 2 * time.Second,
	}
}

func newBMC(t *testing.T, s *ipmisim.Sim, change map[string]any) *BMC {
	t.Helper()
	info := s.DriverInfo()
	for k, v := range change {
		info[k] = v
	}
	b, err := New(info, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	// Give the session slot back: ipmi_sim allows 10 per user.
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ipmitoolPower asks ipmitool, not the driver, for the power state.
func ipmitoolPower(t *testing.T, s *ipmisim.Sim) string {
	t.Helper()
	out, err := s.Ipmitool("chassis", "power", "status")
	if err != nil {
		t.Fatal(err)
	}
	switch strings.TrimSpace(out) {
	case "Chassis Power is on":
		return protocol.PowerOn
	case "Chassis Power is off":
		return protocol.PowerOff
	}
	t.Fatalf("ipmitool chassis power status said %q", out)
	return ""
}

// bootParam5 is "ipmitool chassis bootparam get 5" decoded from its
// "Boot parameter data" bytes.
type bootParam5 struct {
	valid, persistent, efi bool
	selector               byte
}

var paramData = regexp.MustCompile(`Boot parameter data: ([0-9a-fA-F]{10})`)

func ipmitoolBoot(t *testing.T, s *ipmisim.Sim) bootParam5 {
	t.Helper()
	out, err := s.Ipmitool("chassis", "bootparam", "get", "5")
	if err != nil {
		t.Fatal(err)
	}
	m := paramData.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no boot parameter data in ipmitool's answer:\n%s", out)
	}
	d, _ := hex.DecodeString(m[1])
	return bootParam5{valid: d[0]&0x80 != 0, persistent: d[0]&0x40 != 0, efi: d[0]&0x20 != 0, selector: (d[1] >> 2) & 0x0f}
}

// wantEvents checks the chassis actions ipmi_sim made since the last
// ClearEvents. The same action twice in a row counts once: go-ipmi sends a request
// again when its answer is later than the exchange timeout (200 ms here),
// which a loaded machine's ipmi_sim can be, and ipmi_sim then does it
// twice. Power up and down are safe to send again (a real BMC on a lossy
// network does the same).
func wantEvents(t *testing.T, s *ipmisim.Sim, want ...string) {
	t.Helper()
	all := s.Events()
	var got []string
	for i, e := range all {
		if i > 0 && all[i-1] == e {
			continue
		}
		got = append(got, e)
	}
	if len(got) != len(all) {
		t.Logf("chassis actions %q: an action was sent again (its answer came late)", all)
	}
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chassis actions %q; want %q", all, want)
	}
}

func TestValidate(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)

	b := newBMC(t, s, nil)
	if err := b.Validate(ctx); err != nil {
		t.Fatalf("right password: %v", err)
	}

	const wrong = "not-the-Pa55word"
	b = newBMC(t, s, map[string]any{"ipmi_password": wrong})
	start := time.Now()
	err := b.Validate(ctx)
	if err == nil {
		t.Fatal("wrong password accepted")
	}
	want := "IPMI BMC " + s.Addr() + " refused user admin: wrong password"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong password: %v; want an ErrRefused saying %q", err, want)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Fatalf("the error quotes the password: %v", err)
	}
	// Never retried: a refused login repeated locks accounts on real BMCs.
	if n := b.dials.Load(); n != 1 {
		t.Fatalf("%d session setups for a refused login; want 1", n)
	}
	t.Logf("wrong password: %v (%s)", err, time.Since(start))

	b = newBMC(t, s, map[string]any{"ipmi_username": "nobody"})
	err = b.Validate(ctx)
	if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "refused user nobody: the BMC has no such user") {
		t.Fatalf("unknown user: %v", err)
	}
	if n := b.dials.Load(); n != 1 {
		t.Fatalf("%d session setups for an unknown user; want 1", n)
	}
}

func TestValidateNothingListening(t *testing.T) {
	requireTool(t, "ipmi_sim")
	s := ownSim(t)
	s.Kill()
	b := newBMC(t, s, nil)
	err := b.Validate(ctxT(t))
	if err == nil || !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "IPMI BMC "+s.Addr()+" did not answer") {
		t.Fatalf("got %v; want an ErrNoAnswer naming %s", err, s.Addr())
	}
	// No answer is transient: tried 1 + Retries times.
	if n := b.dials.Load(); n != 3 {
		t.Fatalf("%d session setups; want 3 (1 + 2 retries)", n)
	}
	t.Log(err)
}

func TestPowerOnOffReboot(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)

	if st, err := b.PowerState(ctx); err != nil || st != protocol.PowerOff {
		t.Fatalf("power state %q, %v; want power off", st, err)
	}

	if err := b.SetPower(ctx, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if got := ipmitoolPower(t, s); got != protocol.PowerOn {
		t.Fatalf("after power on ipmitool says %s", got)
	}
	wantEvents(t, s, "power 1")
	if st, err := b.PowerState(ctx); err != nil || st != protocol.PowerOn {
		t.Fatalf("power state %q, %v; want power on", st, err)
	}

	// Idempotent: the coordinator may send a command again.
	s.ClearEvents()
	if err := b.SetPower(ctx, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, s)

	// Reboot of a running node: off, then on (Ironic's ipmitool reboot).
	if err := b.SetPower(ctx, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, s, "power 0", "power 1")
	if got := ipmitoolPower(t, s); got != protocol.PowerOn {
		t.Fatalf("after reboot ipmitool says %s", got)
	}

	s.ClearEvents()
	if err := b.SetPower(ctx, protocol.PowerOff); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, s, "power 0")
	if got := ipmitoolPower(t, s); got != protocol.PowerOff {
		t.Fatalf("after power off ipmitool says %s", got)
	}

	// Reboot of a powered-off node powers it on.
	s.ClearEvents()
	if err := b.SetPower(ctx, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, s, "power 1")
	if got := ipmitoolPower(t, s); got != protocol.PowerOn {
		t.Fatalf("after reboot from off ipmitool says %s", got)
	}

	if err := b.SetPower(ctx, "sleep"); err == nil || !strings.Contains(err.Error(), `unknown power state "sleep"`) {
		t.Fatalf("power state sleep: %v", err)
	}
}

// A BMC that acknowledges a power change the machine does not make: the
// driver waits PowerTimeout and says what it saw.
func TestPowerChangeThatDoesNotHappen(t *testing.T) {
	s := sharedSim(t)
	if err := s.Stuck(true); err != nil {
		t.Fatal(err)
	}
	b := newBMC(t, s, nil)
	b.opts.PowerTimeout = 500 * time.Millisecond
	err := b.SetPower(ctxT(t), protocol.PowerOn)
	want := "IPMI BMC " + s.Addr() + " accepted power on but still reports power off after 500ms"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v; want %q", err, want)
	}
	wantEvents(t, s, "power 1")
	if got := ipmitoolPower(t, s); got != protocol.PowerOff {
		t.Fatalf("ipmitool says %s", got)
	}
}

func TestSoftPowerOff(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)

	// Already off: nothing to do.
	if forced, err := b.SoftPowerOff(ctx, 0); err != nil || forced {
		t.Fatalf("off node: forced %v, %v", forced, err)
	}
	wantEvents(t, s)

	// The OS shuts down when asked.
	if err := s.SetChassis(ipmisim.Chassis{Power: true}); err != nil {
		t.Fatal(err)
	}
	forced, err := b.SoftPowerOff(ctx, 0)
	if err != nil || forced {
		t.Fatalf("obedient OS: forced %v, %v", forced, err)
	}
	wantEvents(t, s, "shutdown 1")
	if got := ipmitoolPower(t, s); got != protocol.PowerOff {
		t.Fatalf("after soft power off ipmitool says %s", got)
	}

	// The OS ignores it: forced after the timeout.
	s.ClearEvents()
	if err := s.SetChassis(ipmisim.Chassis{Power: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.IgnoreSoftOff(true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	forced, err = b.SoftPowerOff(ctx, 400*time.Millisecond)
	if err != nil || !forced {
		t.Fatalf("deaf OS: forced %v, %v; want forced", forced, err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("forced after %s, before the 400ms timeout", d)
	}
	wantEvents(t, s, "shutdown 1", "power 0")
	if got := ipmitoolPower(t, s); got != protocol.PowerOff {
		t.Fatalf("after forced power off ipmitool says %s", got)
	}
}

// simBoot is ipmi_sim's name of a boot device, as its chassis script gets it.
var simBoot = map[string]string{"pxe": "pxe", "disk": "default", "cdrom": "cdrom", "bios": "bios"}

// Boot device, once and persistent, UEFI and legacy. What is checked
// independently: the device selector, in the chassis script's state and in
// ipmitool's "chassis bootparam get 5". What is not observable on
// ipmi_sim: the valid, persistent and EFI bits. ipmi_sim hands only the
// selector to the chassis script and answers parameter 5 with those bits
// always 0, so once vs persistent and the boot mode cannot be told apart
// here; TestBootFlagsBytes checks the bytes the driver sends instead. If a
// later simulator does report the bits, they must be right.
func TestBootDevice(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)
	for _, req := range []Boot{
		{Device: "pxe", Persistent: true, Mode: BootModeUEFI},
		{Device: "disk", Persistent: true, Mode: BootModeBIOS},
		{Device: "pxe", Persistent: false, Mode: BootModeBIOS},
		{Device: "disk", Persistent: false, Mode: BootModeUEFI},
		{Device: "cdrom", Persistent: false, Mode: BootModeUEFI},
		{Device: "bios", Persistent: false, Mode: BootModeBIOS},
	} {
		s.ClearEvents()
		if err := b.SetBoot(ctx, req); err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		wantEvents(t, s, "boot "+simBoot[req.Device])
		ch, err := s.Chassis()
		if err != nil {
			t.Fatal(err)
		}
		if ch.Boot != simBoot[req.Device] {
			t.Fatalf("%+v: the chassis boots from %q", req, ch.Boot)
		}
		p := ipmitoolBoot(t, s)
		if p.selector != byte(bootSelectors[req.Device]) {
			t.Fatalf("%+v: ipmitool reads selector %#x; want %#x", req, p.selector, bootSelectors[req.Device])
		}
		if p.valid || p.persistent || p.efi {
			if !p.valid || p.persistent != req.Persistent || p.efi != (req.Mode == BootModeUEFI) {
				t.Fatalf("%+v: the BMC reports valid %v persistent %v efi %v", req, p.valid, p.persistent, p.efi)
			}
		} else {
			t.Logf("%+v: ipmi_sim reports no valid/persistent/EFI bits; only the device is checked", req)
		}
		r, err := b.BootDevice(ctx)
		if err != nil || r.Device != req.Device {
			t.Fatalf("%+v: the driver reads back %+v, %v", req, r, err)
		}
	}

	// The drivers.BMC method: pxe and disk only, persistent.
	if err := b.SetBootDevice(ctx, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if ch, _ := s.Chassis(); ch.Boot != "pxe" {
		t.Fatalf("SetBootDevice(pxe): the chassis boots from %q", ch.Boot)
	}
	if err := b.SetBootDevice(ctx, "floppy"); err == nil || !strings.Contains(err.Error(), `unknown boot device "floppy"`) {
		t.Fatalf("floppy: %v", err)
	}
}

// sessionInfo is Get Session Info for the driver's own session.
func (b *BMC) sessionInfo(ctx context.Context) (*app.GetSessionInfoResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var r *app.GetSessionInfoResponse
	err := b.do(ctx, "report its session", 0, func(ctx context.Context, c *client.Client) error {
		var err error
		r, err = c.GetCurrentSessionInfo(ctx)
		return err
	})
	return r, err
}

func TestSessionReused(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)
	if err := b.Validate(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := b.sessionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := b.PowerState(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.SetBootDevice(ctx, protocol.BootDisk); err != nil {
			t.Fatal(err)
		}
	}
	after, err := b.sessionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.opens.Load(); n != 1 {
		t.Fatalf("%d sessions opened for 21 calls; want 1", n)
	}
	// ipmi_sim's own view: the same session handle, no more sessions.
	if after.SessionHandle != before.SessionHandle || after.CurrentActiveSessions > before.CurrentActiveSessions {
		t.Fatalf("session handle %d → %d, active sessions %d → %d", before.SessionHandle, after.SessionHandle, before.CurrentActiveSessions, after.CurrentActiveSessions)
	}
	t.Logf("session handle %d, %d active sessions on the BMC", after.SessionHandle, after.CurrentActiveSessions)

	// Validate logs in anew and ends the old session: no slot is lost.
	if err := b.Validate(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := b.sessionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.opens.Load(); n != 2 || again.CurrentActiveSessions > after.CurrentActiveSessions {
		t.Fatalf("after a second Validate: %d sessions opened (want 2), active sessions %d → %d", n, after.CurrentActiveSessions, again.CurrentActiveSessions)
	}
}

// The BMC restarts (or is down for a while) between two calls: the driver
// says clearly that it does not answer, then opens a new session when it
// is back, without the caller doing anything.
func TestBMCRestartSurvived(t *testing.T) {
	s := ownSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)
	if err := b.SetPower(ctx, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if st, err := b.PowerState(ctx); err != nil || st != protocol.PowerOn {
		t.Fatalf("after a BMC restart: %q, %v", st, err)
	}
	if n := b.opens.Load(); n != 2 {
		t.Fatalf("%d sessions opened; want 2 (one before, one after the restart)", n)
	}

	s.Kill()
	_, err := b.PowerState(ctx)
	if err == nil || !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "IPMI BMC "+s.Addr()+" did not answer when asked to report the power state") {
		t.Fatalf("BMC down: %v", err)
	}
	t.Log(err)
	if err := s.Revive(); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPower(ctx, protocol.PowerOff); err != nil {
		t.Fatalf("after the BMC came back: %v", err)
	}
	if got := ipmitoolPower(t, s); got != protocol.PowerOff {
		t.Fatalf("ipmitool says %s", got)
	}
}

// Concurrent calls on one BMC run one at a time over one session.
func TestConcurrentCallsSerialized(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				var err error
				switch (i + j) % 3 {
				case 0:
					_, err = b.PowerState(ctx)
				case 1:
					err = b.SetBootDevice(ctx, []string{protocol.BootPXE, protocol.BootDisk}[i%2])
				case 2:
					err = b.SetPower(ctx, protocol.PowerOn)
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", i, j, err)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := b.maxInflight.Load(); m != 1 {
		t.Fatalf("%d requests in flight at once; want 1", m)
	}
	if n := b.opens.Load(); n != 1 {
		t.Fatalf("%d sessions opened; want 1", n)
	}
	if got := ipmitoolPower(t, s); got != protocol.PowerOn {
		t.Fatalf("ipmitool says %s", got)
	}
}

// ipmi_sim does not implement Cold Reset (0xc1): the step must fail and
// say so, not pretend.
func TestResetBMCUnsupportedOnIPMISim(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, nil)
	err := b.RunStep(ctx, "management", "reset_bmc", nil)
	if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "completion code 0xc1") || !strings.Contains(err.Error(), "management.reset_bmc cannot run on this BMC") {
		t.Fatalf("got %v; want an ErrUnsupported naming 0xc1", err)
	}
	t.Log(err)
	// The session survives a refused command.
	if _, err := b.PowerState(ctx); err != nil || b.opens.Load() != 1 {
		t.Fatalf("after the refused reset: %v, %d sessions opened", err, b.opens.Load())
	}
	if err := b.RunStep(ctx, "bios", "apply_configuration", nil); err == nil || !strings.Contains(err.Error(), "no step bios.apply_configuration") {
		t.Fatalf("unknown step: %v", err)
	}
}

// A user whose rights are below the command: the BMC's 0xd4 is reported
// as a refusal with what to change, and not retried.
func TestInsufficientPrivilege(t *testing.T) {
	s := sharedSim(t)
	ctx := ctxT(t)
	b := newBMC(t, s, map[string]any{"ipmi_username": "oper", "ipmi_password": "operpass", "ipmi_priv_level": "USER"})
	if err := b.Validate(ctx); err != nil {
		t.Fatalf("a USER session may read the chassis status: %v", err)
	}
	err := b.SetPower(ctx, protocol.PowerOn)
	if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "refused to power on for user oper at privilege level USER") {
		t.Fatalf("got %v", err)
	}
	wantEvents(t, s)
	t.Log(err)
}
