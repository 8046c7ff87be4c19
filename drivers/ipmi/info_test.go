package ipmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"
)

const secretPW = "s3cret-Pa55"

func baseInfo() map[string]any {
	return map[string]any{"ipmi_address": "192.0.2.10", "ipmi_username": "admin", "ipmi_password": secretPW}
}

func TestNewDefaults(t *testing.T) {
	b, err := New(baseInfo(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := b.cfg
	if c.port != 623 || c.cipher != 3 || c.priv != types.PrivilegeLevelAdministrator || !c.noTimeout {
		t.Fatalf("defaults: port %d cipher %d priv %v disable boot timeout %v; want 623, 3, ADMINISTRATOR, true", c.port, c.cipher, c.priv, c.noTimeout)
	}
	if b.opts.BootMode != BootModeUEFI || b.opts.PowerTimeout.Seconds() != 60 || b.opts.Retries != 2 {
		t.Fatalf("option defaults: %+v", b.opts)
	}
}

// JSON gives numbers as float64 (or json.Number with UseNumber); operators
// and Ironic clients also send them as strings. All must work.
func TestNewAcceptsNumbersAndStrings(t *testing.T) {
	for _, v := range []any{float64(6230), "6230", " 6230 ", json.Number("6230"), 6230} {
		info := baseInfo()
		info["ipmi_port"] = v
		b, err := New(info, Options{})
		if err != nil || b.cfg.port != 6230 {
			t.Fatalf("ipmi_port %T %v: %v", v, v, err)
		}
	}
	for _, v := range []any{float64(17), "17", json.Number("17"), 17} {
		info := baseInfo()
		info["ipmi_cipher_suite"] = v
		b, err := New(info, Options{})
		if err != nil || b.cfg.cipher != 17 {
			t.Fatalf("ipmi_cipher_suite %T %v: %v", v, v, err)
		}
	}
	info := baseInfo()
	info["ipmi_priv_level"] = "operator"
	info["ipmi_disable_boot_timeout"] = "False"
	info["ipmi_address"] = "[2001:db8::1]"
	b, err := New(info, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.cfg.priv != types.PrivilegeLevelOperator || b.cfg.noTimeout || b.cfg.addr() != "[2001:db8::1]:623" {
		t.Fatalf("got %v, disable boot timeout %v", b.cfg, b.cfg.noTimeout)
	}
}

func TestNewSaysWhichKeyIsWrong(t *testing.T) {
	cases := []struct {
		key  string
		val  any
		want string
	}{
		{"ipmi_address", nil, "missing"},
		{"ipmi_address", "  ", "missing"},
		{"ipmi_address", 10, "must be a string"},
		{"ipmi_address", "10.0.0.1:623", "give the port in ipmi_port"},
		{"ipmi_address", "bmc one", "not an IP address"},
		{"ipmi_port", "abc", "not a whole number"},
		{"ipmi_port", 70000.0, "not a UDP port"},
		{"ipmi_port", 0.0, "not a UDP port"},
		{"ipmi_port", 623.5, "not a whole number"},
		{"ipmi_port", true, "not a whole number"},
		{"ipmi_cipher_suite", "x", "not a whole number"},
		{"ipmi_cipher_suite", 0.0, "no authentication"},
		{"ipmi_cipher_suite", 42.0, "not an IPMI cipher suite"},
		{"ipmi_cipher_suite", -1.0, "not an IPMI cipher suite"},
		{"ipmi_priv_level", "ROOT", "not a privilege level"},
		{"ipmi_username", "a-user-name-longer-than-16", "at most 16"},
		{"ipmi_password", 12345678.0, "must be a string"},
		{"ipmi_password", secretPW + "-and-far-too-long", "at most 20"},
		{"ipmi_disable_boot_timeout", "maybe", "not a boolean"},
	}
	for _, c := range cases {
		info := baseInfo()
		if c.val == nil {
			delete(info, c.key)
		} else {
			info[c.key] = c.val
		}
		_, err := New(info, Options{})
		var ie *InfoError
		if !errors.As(err, &ie) || ie.Key != c.key || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%#v: got %v; want an InfoError on %s saying %q", c.key, c.val, err, c.key, c.want)
			continue
		}
		if strings.Contains(err.Error(), secretPW) || strings.Contains(err.Error(), "12345678") {
			t.Errorf("%s: the error quotes the password: %v", c.key, err)
		}
	}
	if _, err := New(baseInfo(), Options{BootMode: "legacy"}); err == nil {
		t.Error("boot mode legacy accepted; want only uefi or bios")
	}
}

func TestSameInfo(t *testing.T) {
	b, err := New(baseInfo(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	same := baseInfo()
	same["ipmi_port"] = "623"
	same["deploy_kernel"] = "ignored: not an IPMI key"
	changed := baseInfo()
	changed["ipmi_password"] = "another"
	if !b.SameInfo(same) || b.SameInfo(changed) || b.SameInfo(map[string]any{}) {
		t.Fatal("SameInfo does not tell a new password from the same settings")
	}
}

func TestNoPasswordInFormatting(t *testing.T) {
	b, err := New(baseInfo(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", b, b, b, b), fmt.Sprintf("%v %+v %#v", b.cfg, b.cfg, b.cfg)} {
		if strings.Contains(s, secretPW) {
			t.Fatalf("formatting shows the password: %s", s)
		}
	}
	// A library message that quoted the password would be cleaned.
	e := b.fail("test", fmt.Errorf("library says %s", secretPW))
	if strings.Contains(e.Error(), secretPW) {
		t.Fatalf("fail() kept the password: %v", e)
	}
}

// The boot flags bytes must be what Ironic's ipmitool driver sends
// ("raw 0x00 0x08 0x05 0xe0 0x04 ..." for a persistent UEFI PXE boot,
// ipmitool's "bootdev pxe" 0x80 0x04 for once in legacy mode). ipmi_sim
// drops these bits, so this is where they are checked.
func TestBootFlagsBytes(t *testing.T) {
	cases := []struct {
		req    Boot
		b1, b2 byte
	}{
		{Boot{"pxe", true, BootModeUEFI}, 0xe0, 0x04},
		{Boot{"pxe", false, BootModeUEFI}, 0xa0, 0x04},
		{Boot{"disk", true, BootModeBIOS}, 0xc0, 0x08},
		{Boot{"disk", false, BootModeBIOS}, 0x80, 0x08},
		{Boot{"safe", false, BootModeBIOS}, 0x80, 0x0c},
		{Boot{"cdrom", false, BootModeUEFI}, 0xa0, 0x14},
		{Boot{"bios", true, BootModeBIOS}, 0xc0, 0x18},
	}
	for _, c := range cases {
		f, err := bootFlags(c.req)
		if err != nil {
			t.Fatal(err)
		}
		p := f.Pack()
		if len(p) != 5 || p[0] != c.b1 || p[1] != c.b2 || p[2] != 0 || p[3] != 0 || p[4] != 0 {
			t.Errorf("%+v: packed % x; want %02x %02x 00 00 00", c.req, p, c.b1, c.b2)
		}
	}
	if _, err := bootFlags(Boot{"floppy", false, BootModeUEFI}); err == nil {
		t.Error("floppy accepted")
	}
}

// The retry policy: a refused login and a refused command are final; no
// answer and a busy BMC are worth another try; only a missing or garbled
// answer breaks the session.
func TestErrorClasses(t *testing.T) {
	// As go-ipmi v0.9.1 returns them from Connect: the chain cut by %v.
	flat := func(err error) error {
		return newSetupError(fmt.Errorf("connect20 failed after try all cipher suite ids ([3]), errs: \n%v", errors.Join(fmt.Errorf("cmd: rakp1 failed with cipher suite id (3), err: %w", err))))
	}
	wrongPW := flat(fmt.Errorf("validate rakp2 message failed, err: RAKP2 authentication code mismatch: %w", client.ErrRAKPAuthentication))
	unknownUser := flat(types.NewRmcpStatusError(types.RmcpStatusCodeUnauthorizedName))
	noSlots := flat(types.NewRmcpStatusError(types.RmcpStatusCodeNoResToCreateSess))
	privRefused := newSetupError(fmt.Errorf("SetSessionPrivilegeLevel to (ADMINISTRATOR) failed, err: %w", types.NewResponseError(0x81, "level not available")))
	invalidCmd := types.NewResponseError(types.CodeInvalidCommand, "Invalid command")
	busy := types.NewResponseError(types.CodeNodeBusy, "busy")
	lost := fmt.Errorf("IPMI LAN: no matching IPMI response after 2 attempt(s): %w", context.DeadlineExceeded)
	for _, c := range []struct {
		name          string
		err           error
		retry, breaks bool
		kind          error
		wantInMessage string
	}{
		{"wrong password", wrongPW, false, true, ErrRefused, "refused user admin: wrong password"},
		{"unknown user", unknownUser, false, true, ErrRefused, "refused user admin: the BMC has no such user"},
		{"no session slots", noSlots, true, true, nil, "refused the session for user admin for now (RMCP+ status 0x01"},
		{"privilege", privRefused, false, false, ErrRefused, "at privilege level ADMINISTRATOR"},
		{"invalid command", invalidCmd, false, false, ErrUnsupported, "cannot test: it answered completion code 0xc1"},
		{"busy", busy, true, false, nil, "refused to test: completion code 0xc0"},
		{"no answer", lost, true, true, ErrNoAnswer, "did not answer when asked to test"},
	} {
		b, _ := New(baseInfo(), Options{})
		if got := retryable(c.err); got != c.retry {
			t.Errorf("%s: retryable %v, want %v", c.name, got, c.retry)
		}
		if got := breaksSession(c.err); got != c.breaks {
			t.Errorf("%s: breaksSession %v, want %v", c.name, got, c.breaks)
		}
		e := b.fail("test", c.err)
		if c.kind != nil && !errors.Is(e, c.kind) {
			t.Errorf("%s: %v is not %v", c.name, e, c.kind)
		}
		if !strings.Contains(e.Error(), c.wantInMessage) || !strings.Contains(e.Error(), "IPMI BMC 192.0.2.10:623") {
			t.Errorf("%s: message %q; want it to name the BMC and say %q", c.name, e, c.wantInMessage)
		}
	}
}

// TestCloseDelayAvoidsKeepAlive checks when a session may be closed: never
// while go-ipmi's keep-alive request can be running (from its tick every
// 30 s for busy long), nor in the lead before the next tick.
func TestCloseDelayAvoidsKeepAlive(t *testing.T) {
	const busy = 7 * time.Second
	s := time.Second
	for _, c := range []struct{ age, want time.Duration }{
		{0, 0},
		{10 * s, 0},
		{26 * s, 0},            // before the first tick's lead
		{27 * s, 10 * s},       // in the lead: wait for the tick's request to end
		{30 * s, 7 * s},        // the tick
		{33 * s, 4 * s},        // its request may still run
		{37 * s, 0},            // after it
		{56 * s, 0},            // before the next lead
		{58 * s, 9 * s},        // in the next lead
		{(300 + 1) * s, 6 * s}, // many periods later
	} {
		if got := closeDelay(c.age, busy); got != c.want {
			t.Errorf("closeDelay(%v) = %v, want %v", c.age, got, c.want)
		}
		// Whatever the wait, the close lands outside every keep-alive window.
		at := (c.age + closeDelay(c.age, busy))
		if at >= keepAlivePeriod-keepAliveLead {
			if p := at % keepAlivePeriod; p < busy || p >= keepAlivePeriod-keepAliveLead {
				t.Errorf("a session of age %v is closed at age %v, inside a keep-alive window", c.age, at)
			}
		}
	}
}
