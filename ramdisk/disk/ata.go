package disk

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MethodATASecurityErase is the ATA Security Erase Unit command (normal
// erase: the drive writes zeros over all user data, so the read-back
// verification holds).
const MethodATASecurityErase Method = "ata-security-erase"

// ATASecurityErase erases an ATA drive (SATA behind libata, reached with
// SCSI ATA PASS-THROUGH over SG_IO) with the Security feature set, as IPA
// does with hdparm: unlock a drive a previous attempt left locked (empty
// password), set an empty user password, ERASE PREPARE, ERASE UNIT, and
// check that security is disabled again. It uses the normal erase, not the
// enhanced one: the enhanced erase writes a vendor pattern, which the
// zeros verification after it would take for a failed erase.
type ATASecurityErase struct {
	// Transport runs one ATA command; nil means SG_IO on the device.
	// Tests substitute a simulated drive.
	Transport ATATransport
}

// ATACommand is one ATA command sent through ATA PASS-THROUGH (16).
type ATACommand struct {
	Command  byte
	Features byte
	// DataIn reads one 512-byte sector into Data; DataOut writes Data;
	// neither: a non-data command.
	DataIn, DataOut bool
	Data            []byte
	Timeout         time.Duration
}

// ATATransport runs an ATA command on a device path.
type ATATransport func(path string, cmd ATACommand) error

const (
	ataIdentify         = 0xEC
	ataSecuritySetPass  = 0xF1
	ataSecurityUnlock   = 0xF2
	ataSecurityPrepare  = 0xF3
	ataSecurityErase    = 0xF4
	ataSecurityWord     = 128
	ataSecSupported     = 1 << 0
	ataSecEnabled       = 1 << 1
	ataSecLocked        = 1 << 2
	ataSecFrozen        = 1 << 3
	ataSecCountExpired  = 1 << 4
	ataNormalEraseWord  = 89
	ataDefaultEraseTime = 12 * time.Hour
)

// ATASecurity is the drive's Security feature set state (IDENTIFY word
// 128) and its estimate for a normal erase.
type ATASecurity struct {
	Supported, Enabled, Locked, Frozen, CountExpired bool
	EraseTime                                        time.Duration
}

// ParseATASecurity reads the security word of an IDENTIFY DEVICE sector.
func ParseATASecurity(id []byte) ATASecurity {
	w := binary.LittleEndian.Uint16(id[2*ataSecurityWord:])
	s := ATASecurity{Supported: w&ataSecSupported != 0, Enabled: w&ataSecEnabled != 0, Locked: w&ataSecLocked != 0,
		Frozen: w&ataSecFrozen != 0, CountExpired: w&ataSecCountExpired != 0}
	// Word 89: minutes/2 (bit 15 set: extended format, bits 14:0).
	t := binary.LittleEndian.Uint16(id[2*ataNormalEraseWord:])
	if t&0x8000 != 0 {
		t &= 0x7fff
	} else {
		t &= 0xff
	}
	if t != 0 {
		s.EraseTime = time.Duration(t) * 2 * time.Minute
	}
	return s
}

func (a ATASecurityErase) transport() ATATransport {
	if a.Transport != nil {
		return a.Transport
	}
	return sgioATA
}

func (a ATASecurityErase) identify(path string) (ATASecurity, error) {
	id := alignedBuffer(512)
	if err := a.transport()(path, ATACommand{Command: ataIdentify, DataIn: true, Data: id, Timeout: 15 * time.Second}); err != nil {
		return ATASecurity{}, err
	}
	return ParseATASecurity(id), nil
}

// passwordBlock is the 512-byte data of the security commands: word 0
// (bit 0: 0 = user password; for ERASE UNIT bit 1: enhanced) and the
// 32-byte password, empty here (hdparm's NULL).
func passwordBlock() []byte { return alignedBuffer(512) }

// Detect implements HardwareEraser: true for an ATA drive whose IDENTIFY
// says the Security feature set is supported.
func (a ATASecurityErase) Detect(ctx context.Context, dev Device) (Method, bool, string) {
	if dev.Regular || strings.HasPrefix(dev.Name, "nvme") {
		return "", false, ""
	}
	sec, err := a.identify(dev.Path)
	if err != nil {
		return "", false, fmt.Sprintf("ATA Security Erase not used on %s: not an ATA drive reachable by ATA PASS-THROUGH (%v)", dev.Path, err)
	}
	if !sec.Supported {
		return "", false, fmt.Sprintf("ATA Security Erase not used on %s: the drive does not support the Security feature set", dev.Path)
	}
	return MethodATASecurityErase, true, ""
}

// Run implements HardwareEraser. The erase command cannot be interrupted;
// ctx is checked before it starts.
func (a ATASecurityErase) Run(ctx context.Context, dev Device, m Method) error {
	if m != MethodATASecurityErase {
		return fmt.Errorf("unknown method %s", m)
	}
	t := a.transport()
	sec, err := a.identify(dev.Path)
	if err != nil {
		return fmt.Errorf("IDENTIFY DEVICE: %w", err)
	}
	if sec.Frozen {
		return fmt.Errorf("the drive's security is frozen (the firmware froze it at boot); power-cycle the node (some BIOSes have a setting to leave it unfrozen) and clean again")
	}
	if sec.Locked {
		// A previous attempt that died after setting our empty password.
		_ = t(dev.Path, ATACommand{Command: ataSecurityUnlock, DataOut: true, Data: passwordBlock(), Timeout: 15 * time.Second})
		if sec, err = a.identify(dev.Path); err != nil {
			return fmt.Errorf("IDENTIFY DEVICE after unlock: %w", err)
		}
		if sec.Locked {
			return fmt.Errorf("the drive is locked with a security password that is not the empty one; unlock it with its password (hdparm --security-unlock) and clean again")
		}
	}
	if !sec.Enabled {
		if err := t(dev.Path, ATACommand{Command: ataSecuritySetPass, DataOut: true, Data: passwordBlock(), Timeout: 15 * time.Second}); err != nil {
			return fmt.Errorf("SECURITY SET PASSWORD: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t(dev.Path, ATACommand{Command: ataSecurityPrepare, Timeout: 15 * time.Second}); err != nil {
		return fmt.Errorf("SECURITY ERASE PREPARE: %w", err)
	}
	timeout := ataDefaultEraseTime
	if sec.EraseTime > 0 {
		timeout = sec.EraseTime*2 + 10*time.Minute
	}
	if err := t(dev.Path, ATACommand{Command: ataSecurityErase, DataOut: true, Data: passwordBlock(), Timeout: timeout}); err != nil {
		// Leave the drive usable for a fallback: unlock and disable.
		_ = t(dev.Path, ATACommand{Command: ataSecurityUnlock, DataOut: true, Data: passwordBlock(), Timeout: 15 * time.Second})
		return fmt.Errorf("SECURITY ERASE UNIT: %w", err)
	}
	if sec, err = a.identify(dev.Path); err != nil {
		return fmt.Errorf("IDENTIFY DEVICE after erase: %w", err)
	}
	if sec.Enabled || sec.Locked {
		return fmt.Errorf("after SECURITY ERASE UNIT the drive's security is still enabled; the erase did not complete")
	}
	_ = RereadPartitions(dev.Path)
	return nil
}

// sgIOHdr mirrors struct sg_io_hdr from <scsi/sg.h> on 64-bit Linux.
type sgIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         uintptr
	Cmdp           uintptr
	Sbp            uintptr
	Timeout        uint32
	Flags          uint32
	PackID         int32
	_              uint32
	UsrPtr         uintptr
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
}

const (
	sgIO            = 0x2285
	sgDxferNone     = -1
	sgDxferToDev    = -2
	sgDxferFromDev  = -3
	ataPassThrough  = 0x85
	ataProtoNonData = 3
	ataProtoPIOIn   = 4
	ataProtoPIOOut  = 5
)

// ATAPassThroughCDB builds the SCSI ATA PASS-THROUGH (16) command block.
func ATAPassThroughCDB(cmd ATACommand) [16]byte {
	var cdb [16]byte
	cdb[0] = ataPassThrough
	switch {
	case cmd.DataIn:
		cdb[1] = ataProtoPIOIn << 1
		cdb[2] = 1<<3 | 1<<2 | 2 // T_DIR from device, BYTE_BLOCK, length in SECTOR COUNT
		cdb[6] = 1
	case cmd.DataOut:
		cdb[1] = ataProtoPIOOut << 1
		cdb[2] = 1<<2 | 2
		cdb[6] = 1
	default:
		cdb[1] = ataProtoNonData << 1
	}
	cdb[4] = cmd.Features
	cdb[14] = cmd.Command
	return cdb
}

func sgioATA(path string, cmd ATACommand) error {
	flags := os.O_RDONLY
	if cmd.DataOut || cmd.Command == ataSecurityPrepare {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// The kernel gets these addresses as integers: keep them on the heap
	// (alignedBuffer's memory escapes), where nothing moves.
	mem := alignedBuffer(64)
	c := ATAPassThroughCDB(cmd)
	cdb, sense := mem[:16], mem[32:64]
	copy(cdb, c[:])
	h := sgIOHdr{InterfaceID: 'S', DxferDirection: sgDxferNone, CmdLen: 16, MxSbLen: uint8(len(sense)),
		Cmdp: uintptr(unsafe.Pointer(&cdb[0])), Sbp: uintptr(unsafe.Pointer(&sense[0])),
		Timeout: uint32(min(cmd.Timeout, time.Duration(1<<31)*time.Millisecond) / time.Millisecond)}
	if cmd.DataIn || cmd.DataOut {
		h.DxferDirection = sgDxferToDev
		if cmd.DataIn {
			h.DxferDirection = sgDxferFromDev
		}
		h.DxferLen = uint32(len(cmd.Data))
		h.Dxferp = uintptr(unsafe.Pointer(&cmd.Data[0]))
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), sgIO, uintptr(unsafe.Pointer(&h)))
	runtime.KeepAlive(mem)
	runtime.KeepAlive(cmd.Data)
	if errno != 0 {
		return errno
	}
	if h.Status != 0 || h.HostStatus != 0 || h.DriverStatus&^0x08 != 0 {
		return fmt.Errorf("ATA command 0x%02x failed (SCSI status 0x%x, host 0x%x, driver 0x%x, sense % x)", cmd.Command, h.Status, h.HostStatus, h.DriverStatus, sense[:h.SbLenWr])
	}
	return nil
}
