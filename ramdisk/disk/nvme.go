package disk

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultHardwareErasers returns the hardware erasers Erase tries when
// EraseOptions.Hardware is nil, in IPA's order: NVMe Format for NVMe
// namespaces, ATA Security Erase for the other drives that support it.
func DefaultHardwareErasers() []HardwareEraser {
	return []HardwareEraser{NVMeFormat{}, ATASecurityErase{}}
}

// NVMeFormat erases an NVMe namespace with the Format NVM admin command,
// preferring a cryptographic erase over a user-data erase. It is only
// selected when Identify Controller says Format NVM and the chosen erase
// are supported, the format would not spill onto other namespaces, and
// Identify Namespace says deallocated blocks read as zeros (DLFEAT), so
// that the read-back verification after it is meaningful.
type NVMeFormat struct {
	// TimeoutMs bounds the format command; 0 means 10 minutes, like
	// nvme-cli. Crypto erase takes seconds; user-data erase can take long.
	TimeoutMs uint32
}

// nvmePassthruCmd mirrors struct nvme_passthru_cmd from
// <linux/nvme_ioctl.h> (72 bytes); field order and sizes must not change.
type nvmePassthruCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	Cdw2        uint32
	Cdw3        uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	Cdw10       uint32
	Cdw11       uint32
	Cdw12       uint32
	Cdw13       uint32
	Cdw14       uint32
	Cdw15       uint32
	TimeoutMs   uint32
	Result      uint32
}

const (
	nvmeIoctlID       = 0x4E40     // _IO('N', 0x40): namespace id of a block device
	nvmeIoctlAdminCmd = 0xC0484E41 // _IOWR('N', 0x41, struct nvme_passthru_cmd)
	nvmeOpIdentify    = 0x06
	nvmeOpFormat      = 0x80
	nvmeSESUserData   = 1
	nvmeSESCrypto     = 2
)

// nvmeFormatPlan is what Detect learnt, needed by Run.
type nvmeFormatPlan struct {
	nsid  uint32
	cdw10 uint32
}

// Detect identifies the controller and namespace behind dev.
func (n NVMeFormat) Detect(ctx context.Context, dev Device) (Method, bool, string) {
	if !strings.HasPrefix(dev.Name, "nvme") || dev.Regular {
		return "", false, ""
	}
	_, m, err := n.plan(dev)
	if err != nil {
		return "", false, fmt.Sprintf("NVMe format not used on %s: %v", dev.Path, err)
	}
	return m, true, ""
}

// Run formats the namespace with the method Detect chose. The ioctl cannot
// be interrupted; ctx is only checked before it starts.
func (n NVMeFormat) Run(ctx context.Context, dev Device, m Method) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	plan, want, err := n.plan(dev)
	if err != nil {
		return err
	}
	if want != m {
		return fmt.Errorf("device capabilities changed since detection (%s, now %s)", m, want)
	}
	f, err := os.OpenFile(dev.Path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	timeout := n.TimeoutMs
	if timeout == 0 {
		timeout = 600000
	}
	cmd := nvmePassthruCmd{Opcode: nvmeOpFormat, NSID: plan.nsid, Cdw10: plan.cdw10, TimeoutMs: timeout}
	if err := nvmeAdmin(f, &cmd); err != nil {
		return fmt.Errorf("Format NVM: %w", err)
	}
	_ = RereadPartitions(dev.Path) // best-effort: the table is gone
	return nil
}

func (n NVMeFormat) plan(dev Device) (nvmeFormatPlan, Method, error) {
	f, err := os.OpenFile(dev.Path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nvmeFormatPlan{}, "", err
	}
	defer f.Close()
	nsid, err := unix.IoctlRetInt(int(f.Fd()), nvmeIoctlID)
	if err != nil {
		return nvmeFormatPlan{}, "", fmt.Errorf("not an NVMe namespace (NVME_IOCTL_ID: %v)", err)
	}
	ctrl := alignedBuffer(4096)
	if err := nvmeIdentify(f, 0, 1, ctrl); err != nil {
		return nvmeFormatPlan{}, "", fmt.Errorf("identify controller: %w", err)
	}
	oacs := binary.LittleEndian.Uint16(ctrl[256:])
	nn := binary.LittleEndian.Uint32(ctrl[516:])
	fna := ctrl[524]
	if oacs&(1<<1) == 0 {
		return nvmeFormatPlan{}, "", fmt.Errorf("controller does not support Format NVM")
	}
	if fna&1 != 0 && nn > 1 {
		return nvmeFormatPlan{}, "", fmt.Errorf("format would erase all %d namespaces of the controller", nn)
	}
	ns := alignedBuffer(4096)
	if err := nvmeIdentify(f, uint32(nsid), 0, ns); err != nil {
		return nvmeFormatPlan{}, "", fmt.Errorf("identify namespace %d: %w", nsid, err)
	}
	if ns[33]&0x7 != 1 {
		return nvmeFormatPlan{}, "", fmt.Errorf("deallocated blocks are not reported to read as zeros (DLFEAT=%d), so the erase could not be verified", ns[33]&0x7)
	}
	// Keep the current LBA format, metadata and protection settings:
	// the erase must not change how the namespace is formatted.
	flbas := ns[26]
	lbaf := uint32(flbas&0xF) | uint32(flbas>>5&0x3)<<4
	mset := uint32(flbas >> 4 & 1)
	dps := ns[29]
	pi, pil := uint32(dps&0x7), uint32(dps>>3&1)
	ses, m := uint32(nvmeSESUserData), MethodNVMeUserDataFormat
	if fna&(1<<2) != 0 {
		ses, m = nvmeSESCrypto, MethodNVMeCryptoFormat
	}
	cdw10 := lbaf&0xF | mset<<4 | pi<<5 | pil<<8 | ses<<9 | (lbaf>>4)<<12
	return nvmeFormatPlan{nsid: uint32(nsid), cdw10: cdw10}, m, nil
}

func nvmeIdentify(f *os.File, nsid, cns uint32, buf []byte) error {
	cmd := nvmePassthruCmd{
		Opcode:  nvmeOpIdentify,
		NSID:    nsid,
		Addr:    uint64(uintptr(unsafe.Pointer(&buf[0]))),
		DataLen: uint32(len(buf)),
		Cdw10:   cns,
	}
	err := nvmeAdmin(f, &cmd)
	// The kernel wrote into buf through an address the GC cannot see.
	runtime.KeepAlive(buf)
	return err
}

func nvmeAdmin(f *os.File, cmd *nvmePassthruCmd) error {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(cmd)))
	if errno != 0 {
		return errno
	}
	if r != 0 {
		// A positive return is the NVMe status field.
		return fmt.Errorf("NVMe status 0x%x", r)
	}
	return nil
}
