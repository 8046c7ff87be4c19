package api

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestViewBootModeSecureBoot: boot_mode and secure_boot show what the
// ramdisk's inventory said (fsm.Node BootMode, SecureBoot), null before.
func TestViewBootModeSecureBoot(t *testing.T) {
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(viewPublisher{}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := New(e, slog.New(slog.NewTextHandler(io.Discard, nil)), "")
	r := httptest.NewRequest("GET", "http://127.0.0.1:6385/v1/nodes/u1", nil)
	on, off := true, false
	for _, c := range []struct {
		mode   string
		secure *bool
		wantM  any
		wantS  any
	}{
		{"", nil, nil, nil},
		{"uefi", &on, "uefi", true},
		{"uefi", &off, "uefi", false},
		{"bios", &off, "bios", false},
	} {
		n := &fsm.Node{UUID: "u1", Driver: "ipmi", ProvisionState: fsm.Manageable, BootMode: c.mode, SecureBoot: c.secure}
		v := s.view(baseURL(r), n, true)
		if v.BootMode != c.wantM || v.SecureBoot != c.wantS {
			t.Errorf("node with boot mode %q, secure boot %v: boot_mode %v, secure_boot %v; want %v, %v", c.mode, c.secure, v.BootMode, v.SecureBoot, c.wantM, c.wantS)
		}
	}
}
