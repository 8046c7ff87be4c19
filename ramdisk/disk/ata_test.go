package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// simATA is a drive with the ATA Security feature set, as the ATA spec's
// state machine has it (SEC1 disabled, SEC5 enabled unlocked, SEC4
// locked, frozen), answering ATA PASS-THROUGH commands.
type simATA struct {
	supported, frozen, enabled, locked bool
	password                           []byte // the drive's user password when enabled
	eraseFails                         bool
	prepared                           bool
	erased                             bool
	log                                []string
}

func (s *simATA) run(path string, c ATACommand) error {
	s.log = append(s.log, fmt.Sprintf("%02x", c.Command))
	pw := func() []byte { return c.Data[2:34] }
	switch c.Command {
	case ataIdentify:
		var w uint16
		for bit, on := range map[uint16]bool{ataSecSupported: s.supported, ataSecEnabled: s.enabled, ataSecLocked: s.locked, ataSecFrozen: s.frozen} {
			if on {
				w |= bit
			}
		}
		clear(c.Data)
		binary.LittleEndian.PutUint16(c.Data[2*ataSecurityWord:], w)
		binary.LittleEndian.PutUint16(c.Data[2*ataNormalEraseWord:], 3) // 6 minutes
		return nil
	case ataSecuritySetPass:
		if s.frozen || s.locked {
			return errors.New("abort")
		}
		s.enabled, s.password = true, append([]byte(nil), pw()...)
		return nil
	case ataSecurityUnlock:
		if s.frozen || string(pw()) != string(s.password) {
			return errors.New("abort")
		}
		s.locked = false
		return nil
	case ataSecurityPrepare:
		s.prepared = true
		return nil
	case ataSecurityErase:
		if !s.prepared || !s.enabled || string(pw()) != string(s.password) || s.eraseFails {
			return errors.New("abort")
		}
		s.prepared, s.enabled, s.erased = false, false, true
		return nil
	}
	return errors.New("unknown command")
}

func TestATASecurityErase(t *testing.T) {
	dev := Device{Name: "sda", Path: "/dev/sda"}
	for _, c := range []struct {
		name    string
		drive   simATA
		detect  bool
		wantErr string
		log     string
	}{
		{"not supported", simATA{}, false, "", "ec"},
		{"disabled: set password, prepare, erase", simATA{supported: true}, true, "", "ec ec f1 f3 f4 ec"},
		{"left locked by an earlier attempt", simATA{supported: true, enabled: true, locked: true, password: make([]byte, 32)}, true, "", "ec ec f2 ec f3 f4 ec"},
		{"locked by someone else", simATA{supported: true, enabled: true, locked: true, password: []byte("x")}, true, "locked with a security password", "ec ec f2 ec"},
		{"frozen", simATA{supported: true, frozen: true}, true, "frozen", "ec ec"},
		{"erase fails", simATA{supported: true, eraseFails: true}, true, "SECURITY ERASE UNIT", "ec ec f1 f3 f4 f2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.drive
			a := ATASecurityErase{Transport: d.run}
			m, ok, why := a.Detect(t.Context(), dev)
			if ok != c.detect {
				t.Fatalf("Detect = %v (%s), want %v", ok, why, c.detect)
			}
			if ok {
				err := a.Run(t.Context(), dev, m)
				if c.wantErr == "" && (err != nil || !d.erased) {
					t.Fatalf("Run: %v, erased %v", err, d.erased)
				}
				if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
					t.Fatalf("Run: %v, want %q", err, c.wantErr)
				}
			} else if !strings.Contains(why, "does not support the Security feature set") {
				t.Fatalf("reason %q", why)
			}
			if got := strings.Join(d.log, " "); got != c.log {
				t.Fatalf("commands %s, want %s", got, c.log)
			}
		})
	}
}

func TestATAPassThroughCDB(t *testing.T) {
	in := ATAPassThroughCDB(ATACommand{Command: ataIdentify, DataIn: true})
	out := ATAPassThroughCDB(ATACommand{Command: ataSecurityErase, DataOut: true})
	none := ATAPassThroughCDB(ATACommand{Command: ataSecurityPrepare})
	// sg3_utils' sg_sat_identify and hdparm send these bytes.
	if in[0] != 0x85 || in[1] != 0x08 || in[2] != 0x0e || in[6] != 1 || in[14] != 0xec {
		t.Errorf("IDENTIFY CDB % x", in)
	}
	if out[1] != 0x0a || out[2] != 0x06 || out[6] != 1 || out[14] != 0xf4 {
		t.Errorf("ERASE UNIT CDB % x", out)
	}
	if none[1] != 0x06 || none[2] != 0 || none[14] != 0xf3 {
		t.Errorf("ERASE PREPARE CDB % x", none)
	}
	id := make([]byte, 512)
	binary.LittleEndian.PutUint16(id[2*ataSecurityWord:], ataSecSupported|ataSecFrozen)
	binary.LittleEndian.PutUint16(id[2*ataNormalEraseWord:], 0x8000|40)
	if s := ParseATASecurity(id); !s.Supported || !s.Frozen || s.Enabled || s.EraseTime.Minutes() != 80 {
		t.Errorf("ParseATASecurity = %+v", s)
	}
}
