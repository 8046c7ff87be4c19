package boot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/protocol"
)

// httpBooter is a BMC that boots an image by UEFI HTTP boot: the boot
// source override UefiHttp with HttpBootUri (redfish; Ironic's
// redfish-https boot interface).
type httpBooter interface {
	BootFromHTTP(ctx context.Context, url string) error
	ClearHTTPBoot(ctx context.Context) error
}

// httpMedia is a UEFI HTTP boot seen as the boot's media: the BMC is
// given the URL of the boot's ISO instead of a virtual CD, and the clean
// up clears its HttpBootUri instead of ejecting (as Ironic's
// redfish-https clean_up_ramdisk does). No virtual media is touched.
type httpMedia struct{ hb httpBooter }

func (h httpMedia) BootFromMedia(ctx context.Context, isoURL, _ string) error {
	return h.hb.BootFromHTTP(ctx, isoURL)
}

func (h httpMedia) EjectBootMedia(ctx context.Context) error { return h.hb.ClearHTTPBoot(ctx) }

// bootMedia is how a node's ramdisk boot reaches its BMC: virtual media,
// or UEFI HTTP boot when its boot interface is redfish-https. ok is false
// for a BMC with neither (network boot, self-booting drivers).
func (p *Boot) bootMedia(node string, b any) (mediaBooter, bool, error) {
	mb, ok := b.(mediaBooter)
	if !ok {
		return nil, false, nil
	}
	if !p.cfg.HTTPBoot(node) {
		return mb, true, nil
	}
	hb, can := b.(httpBooter)
	if !can {
		return nil, false, fmt.Errorf("the BMC of node %s cannot boot by UEFI HTTP boot (boot_interface redfish-https); use redfish-virtual-media", node)
	}
	return httpMedia{hb}, true, nil
}

// maxHTTPBootSlack bounds what a per-boot ISO may add to the ramdisk ISO.
const maxHTTPBootSlack = 8 << 20

// httpBootISO builds the ISO a node's UEFI HTTP boot fetches: the ramdisk
// ISO with the boot's parameters added to the kernel command line of its
// GRUB menu (one image only reaches the firmware, so the parameters
// cannot travel on a second medium; Ironic builds a per-node ISO for
// redfish-https the same way). xorriso (Debian's xorriso) rewrites
// /boot/grub/grub.cfg and keeps the ISO's boot images. The edited menu
// holds the boot's credential: it is written to a RAM filesystem only
// (ramDir), for the time of the build, and the result stays in memory.
func httpBootISO(ctx context.Context, iso, params string) ([]byte, error) {
	if err := bootmedia.CheckParams(params); err != nil {
		return nil, err
	}
	// GRUB reads the linux line as script: nothing of its syntax.
	if err := protocol.CheckKernelParams(params); err != nil {
		return nil, fmt.Errorf("the boot's parameters (the site's --ramdisk-params, the node's driver_info kernel_append_params) cannot go on a GRUB menu's linux line: %w", err)
	}
	tool, err := exec.LookPath("xorriso")
	if err != nil {
		return nil, errors.New("the edge agent's host cannot build the UEFI HTTP boot ISO (boot_interface redfish-https): xorriso is missing (install Debian's xorriso), or use redfish-virtual-media")
	}
	st, err := os.Stat(iso)
	if err != nil {
		return nil, fmt.Errorf("ramdisk ISO: %w", err)
	}
	// The source's menu holds nothing secret: read into a private folder
	// (xorriso's -extract replaces its target, so never a device path).
	dir, err := os.MkdirTemp("", "bmedge-httpboot-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "grub.cfg")
	var errb bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, "-osirrox", "on", "-indev", iso, "-extract", "/boot/grub/grub.cfg", src)
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the ramdisk ISO %s has no /boot/grub/grub.cfg to put the boot's parameters in (xorriso: %v: %s); build it with make ramdisk", iso, err, lastLine(errb.String()))
	}
	if fi, err := os.Stat(src); err != nil || fi.Size() > maxMenuBytes {
		return nil, fmt.Errorf("the ramdisk ISO %s's /boot/grub/grub.cfg is missing or over %d bytes; build it with make ramdisk", iso, maxMenuBytes)
	}
	menu, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	edited, n := addKernelParams(string(menu), params)
	if n == 0 {
		return nil, fmt.Errorf("the ramdisk ISO %s's GRUB menu boots no kernel (no linux line); build it with make ramdisk", iso)
	}
	// The edited menu holds the boot's credential: on a RAM filesystem
	// only, for the time of the build.
	ram, err := ramDir("bmedge-httpboot-")
	if err != nil {
		return nil, fmt.Errorf("build the UEFI HTTP boot ISO: %w", err)
	}
	defer os.RemoveAll(ram)
	cfg := filepath.Join(ram, "grub.cfg")
	if err := os.WriteFile(cfg, []byte(edited), 0o600); err != nil {
		return nil, err
	}
	var img bytes.Buffer
	errb.Reset()
	cmd = exec.CommandContext(ctx, tool, "-indev", iso, "-outdev", "-", "-boot_image", "any", "replay",
		"-update", cfg, "/boot/grub/grub.cfg", "-commit")
	cmd.Stdout = &limitedBuffer{b: &img, max: st.Size() + maxHTTPBootSlack}
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build the UEFI HTTP boot ISO of the ramdisk ISO %s: xorriso: %v: %s", iso, err, lastLine(errb.String()))
	}
	return img.Bytes(), nil
}

// maxMenuBytes bounds the ramdisk ISO's GRUB menu read back.
const maxMenuBytes = 1 << 20

// addKernelParams adds params to every linux line of a GRUB menu, and
// says how many it changed.
func addKernelParams(menu, params string) (string, int) {
	var out []string
	n := 0
	for _, l := range strings.Split(menu, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "linux" {
			l += " " + params
			n++
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n"), n
}

// limitedBuffer fails writes past max bytes.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int64
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if int64(l.b.Len()+len(p)) > l.max {
		return 0, fmt.Errorf("the built ISO is over %d bytes", l.max)
	}
	return l.b.Write(p)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// addHTTPBoot builds and serves the ISO of a node's new UEFI HTTP boot
// under a random 128-bit name, until the boot ends (as a parameters
// image: it holds the boot's credential), and returns its URL and what
// the state folder keeps of it.
func (m *mediaServer) addHTTPBoot(ctx context.Context, node, params string) (string, vmKept, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", vmKept{}, err
	}
	k := vmKept{Token: hex.EncodeToString(b), Params: params, Created: m.now(), ISO: true}
	if err := m.restoreHTTPBoot(ctx, node, k.Token, k.Params, k.Created); err != nil {
		return "", vmKept{}, err
	}
	return m.base + "/boot/" + k.Token + "/boot.iso", k, nil
}

// restoreHTTPBoot builds and serves a node's UEFI HTTP boot ISO under
// token (a boot kept in the state folder, or a new one): a restarted
// agent serves the same URL, so a firmware that has not fetched it yet
// still boots.
func (m *mediaServer) restoreHTTPBoot(ctx context.Context, node, token, params string, created time.Time) error {
	data, err := httpBootISO(ctx, m.iso, params)
	if err != nil {
		return fmt.Errorf("boot of node %s: %w", node, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(node)
	m.images[token] = &paramsImage{node: node, data: data, created: created, iso: true}
	m.byNode[node] = token
	return nil
}
