package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// CmdlineHasNode reports whether a kernel command line names the node
// (a non-empty bm.node, the last one winning). Without it the agent looks
// for its parameters on a boot parameters medium (FindParamsMedium).
func CmdlineHasNode(cmdline string) bool {
	node := ""
	for _, w := range SplitCmdline(cmdline) {
		if v, ok := strings.CutPrefix(w, Prefix+"node="); ok {
			node = v
		}
	}
	return node != ""
}

// MergeParams parses the kernel command line followed by the text of a
// boot parameters medium: a parameter on the medium wins over the same
// one on the command line. Each is split on its own, so that an unclosed
// quote in one cannot swallow the other.
func MergeParams(cmdline, media string) (Params, error) {
	return parseWords(append(SplitCmdline(cmdline), SplitCmdline(media)...))
}

// MediaOptions tune FindParamsMedium; the zero value is right for the
// ramdisk.
type MediaOptions struct {
	SysRoot  string        // sysfs; default /sys
	DevRoot  string        // device nodes; default /dev
	Timeout  time.Duration // how long to wait for the medium; default 60s
	Poll     time.Duration // pause between scans; default 1s
	LogEvery time.Duration // progress lines while waiting; default 5s
	// Rescan runs before every scan but the first, for example to load
	// the modules of USB devices that enumerated late.
	Rescan func(context.Context)
	// Open opens a device node read-only; default os.Open.
	Open func(path string) (io.ReaderAt, io.Closer, error)
}

// ParamsMedium is the block device a boot's parameters came from.
type ParamsMedium struct {
	Name  string // kernel name, e.g. sr0 or sda
	Path  string // device node, e.g. /dev/sr0
	DevNo string // major:minor
	Text  string // the parameters (secret: never log them)
}

// FindParamsMedium looks for the boot parameters medium (an ISO9660
// volume BMPARAMS, lib/bootmedia) on the whole block devices of
// /sys/block (CD-ROMs and USB disks included, partitions not), scanning
// again every Poll until Timeout: a BMC's virtual media are USB devices,
// which enumerate seconds after their host controller's module loads. It
// logs progress every LogEvery, never the parameters. Devices that hold
// no such volume are skipped; a BMPARAMS volume it cannot use, or two
// media that disagree, are errors: the medium is meant for this boot
// and guessing would boot the node as someone else.
func FindParamsMedium(ctx context.Context, opts MediaOptions, logf func(string, ...any)) (ParamsMedium, error) {
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.DevRoot == "" {
		opts.DevRoot = "/dev"
	}
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Poll == 0 {
		opts.Poll = time.Second
	}
	if opts.LogEvery == 0 {
		opts.LogEvery = 5 * time.Second
	}
	if opts.Open == nil {
		opts.Open = func(path string) (io.ReaderAt, io.Closer, error) {
			f, err := os.Open(path)
			if err != nil {
				return nil, nil, err
			}
			return f, f, nil
		}
	}
	start := time.Now()
	deadline := start.Add(opts.Timeout)
	nextLog := start.Add(opts.LogEvery)
	logf("no bm.node on the kernel command line: looking for a boot parameters medium (ISO9660 volume %s) on the block devices, for up to %s",
		bootmedia.VolumeID, opts.Timeout)
	known := map[string]string{} // "name dev size" -> why it is not the medium, for devices that cannot change
	var states []string
	for scan := 0; ; scan++ {
		if scan > 0 && opts.Rescan != nil {
			opts.Rescan(ctx)
		}
		found, st, err := scanMedia(opts, known)
		states = st
		if err != nil {
			return ParamsMedium{}, err
		}
		if found != nil {
			logf("boot parameters medium %s (%s): %d bytes of parameters, found after %.1fs",
				found.Path, found.DevNo, len(found.Text), time.Since(start).Seconds())
			return *found, nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			return ParamsMedium{}, fmt.Errorf("no bm.node on the kernel command line and no boot parameters medium (ISO9660 volume %s holding %s) after %s; block devices: %s; attach the medium (virtual media) or pass bm.node= and the other parameters on the kernel command line",
				bootmedia.VolumeID, bootmedia.FileName, opts.Timeout, describeStates(states))
		}
		if !now.Before(nextLog) {
			logf("no boot parameters medium yet after %.0fs; block devices: %s", now.Sub(start).Seconds(), describeStates(states))
			nextLog = nextLog.Add(opts.LogEvery)
		}
		wait := min(opts.Poll, time.Until(deadline))
		select {
		case <-ctx.Done():
			return ParamsMedium{}, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func describeStates(states []string) string {
	if len(states) == 0 {
		return "none"
	}
	return strings.Join(states, ", ")
}

// scanMedia looks once at every whole block device. It returns the
// medium if exactly one text was found (several devices with the same
// text are fine: the first by name is used), the state of each device
// for the log, and an error for a BMPARAMS volume that cannot be used or
// media that disagree.
func scanMedia(opts MediaOptions, known map[string]string) (*ParamsMedium, []string, error) {
	blockDir := filepath.Join(opts.SysRoot, "block")
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		// sysfs is mounted by init; keep waiting, the timeout reports it.
		return nil, []string{fmt.Sprintf("cannot list %s: %v", blockDir, err)}, nil
	}
	var found []ParamsMedium
	var states []string
	for _, e := range entries { // sorted by name
		name := e.Name()
		if disk.IgnoredName(name) || strings.HasPrefix(name, "loop") {
			continue
		}
		sys := filepath.Join(blockDir, name)
		devNo := readTrim(filepath.Join(sys, "dev"))
		sectors, err := strconv.ParseUint(readTrim(filepath.Join(sys, "size")), 10, 64)
		if err != nil || sectors == 0 {
			states = append(states, name+" (no medium)")
			continue
		}
		if sectors > 1<<54 { // sysfs size is in 512-byte units
			states = append(states, name+" (size out of range)")
			continue
		}
		size := int64(sectors) * 512
		key := fmt.Sprintf("%s %s %d", name, devNo, size)
		if why, ok := known[key]; ok {
			states = append(states, name+" ("+why+")")
			continue
		}
		path := filepath.Join(opts.DevRoot, name)
		r, c, err := opts.Open(path)
		if err != nil {
			// An empty CD drive (ENOMEDIUM), a device node not there yet.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			states = append(states, fmt.Sprintf("%s (cannot open: %v)", name, err))
			continue
		}
		text, err := bootmedia.ReadParams(r, size)
		c.Close()
		var pe *fs.PathError
		switch {
		case errors.Is(err, bootmedia.ErrNotParams):
			known[key] = "not a parameters medium"
			states = append(states, name+" (not a parameters medium)")
		case err != nil && (errors.As(err, &pe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
			// A read error: a USB device still settling. Try again.
			states = append(states, fmt.Sprintf("%s (read error: %v)", name, err))
		case err != nil:
			return nil, states, fmt.Errorf("%s holds a boot parameters medium (volume %s) that cannot be used: %w", path, bootmedia.VolumeID, err)
		default:
			states = append(states, name+" (parameters medium)")
			found = append(found, ParamsMedium{Name: name, Path: path, DevNo: devNo, Text: text})
		}
	}
	if len(found) == 0 {
		return nil, states, nil
	}
	for _, m := range found {
		if m.Text != found[0].Text {
			return nil, states, fmt.Errorf("%s and %s are boot parameters media with different parameters; attach only this boot's", found[0].Path, m.Path)
		}
	}
	return &found[0], states, nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
