package sitecache

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/imagecache"
	"github.com/bmedge/bmedge/protocol"
)

// This file builds the bootable ISO of a ramdisk deploy given a kernel
// and a ramdisk (Ironic's instance_info kernel and ramdisk, its
// image_utils.prepare_boot_iso): both are fetched into the image cache
// under its fetch rule, put on an ISO with GRUB (BIOS and UEFI, made by
// grub-mkrescue, which needs Debian's grub-pc-bin, grub-efi-amd64-bin,
// xorriso and mtools on the agent's host) booting the kernel with the
// ramdisk and the given parameters, and served to the BMCs at
// BuiltPathPrefix under an unguessable token.

// BuiltPathPrefix is the path under which the cache's listener serves
// the ISOs it built.
const BuiltPathPrefix = "/built/"

// MaxBuiltISOs bounds the built ISOs kept (the least recently asked
// goes first); MaxBootFileBytes bounds a kernel or a ramdisk.
const (
	MaxBuiltISOs     = 8
	MaxBootFileBytes = 2 << 30
)

// builtISO is one ISO built.
type builtISO struct {
	token, path string
	at          time.Time
}

// builder holds the built ISOs, in a folder of its own.
type builder struct {
	log *slog.Logger
	mu  sync.Mutex
	dir string
	// byKey is by the kernel, ramdisk and parameters; byToken by token.
	byKey, byToken map[string]*builtISO
	// building serialises builds of one key.
	building map[string]*sync.Mutex
}

func newBuilder(log *slog.Logger) *builder {
	return &builder{log: log, byKey: map[string]*builtISO{}, byToken: map[string]*builtISO{}, building: map[string]*sync.Mutex{}}
}

func (b *builder) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// ServeHTTP serves a built ISO by its token (GET and HEAD, with ranges).
func (b *builder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	token := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, BuiltPathPrefix), ".iso")
	b.mu.Lock()
	iso := b.byToken[token]
	if iso != nil {
		iso.at = time.Now()
	}
	b.mu.Unlock()
	if iso == nil {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(iso.path)
	if err != nil {
		http.Error(w, "built ISO unavailable", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "built ISO unavailable", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "boot.iso", st.ModTime(), f)
}

// BootISOURL fetches a kernel and a ramdisk into the cache (under the
// fetch rule), builds a bootable ISO of them with the kernel parameters
// (protocol.CheckKernelParams) and returns the URL the BMCs fetch it
// from. The same kernel, ramdisk and parameters give the ISO built
// before, while it is kept.
func (sc *Cache) BootISOURL(ctx context.Context, kernel, ramdisk, params string) (string, error) {
	if !sc.on {
		return "", fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): a ramdisk deploy's kernel and ramdisk reach the BMCs only through it", sc.cfg.Site)
	}
	if err := protocol.CheckKernelParams(params); err != nil {
		return "", fmt.Errorf("kernel parameters: %w", err)
	}
	tool, err := exec.LookPath("grub-mkrescue")
	if err != nil {
		return "", errors.New("the edge agent's host cannot build a boot ISO: grub-mkrescue is missing (install Debian's grub-pc-bin, grub-efi-amd64-bin, xorriso and mtools), or give instance_info boot_iso instead of kernel and ramdisk")
	}
	b := sc.built
	sum := sha256.Sum256([]byte(kernel + "\x00" + ramdisk + "\x00" + params))
	key := hex.EncodeToString(sum[:])
	b.mu.Lock()
	lk := b.building[key]
	if lk == nil {
		lk = &sync.Mutex{}
		b.building[key] = lk
	}
	b.mu.Unlock()
	lk.Lock()
	defer lk.Unlock()
	b.mu.Lock()
	if iso := b.byKey[key]; iso != nil {
		iso.at = time.Now()
		b.mu.Unlock()
		return sc.builtBase + iso.token + ".iso", nil
	}
	if b.dir == "" {
		d, err := os.MkdirTemp("", "bmedge-boot-iso-")
		if err != nil {
			b.mu.Unlock()
			return "", err
		}
		b.dir = d
	}
	dir := b.dir
	b.mu.Unlock()

	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "boot", "grub"), 0o700); err != nil {
		return "", err
	}
	for _, f := range []struct{ what, url, name string }{{"kernel", kernel, "vmlinuz"}, {"ramdisk", ramdisk, "initrd"}} {
		if err := sc.copyCached(ctx, f.url, filepath.Join(tree, "boot", f.name)); err != nil {
			return "", fmt.Errorf("%s: %w", f.what, err)
		}
	}
	cfg := "set timeout=0\nset default=0\nserial --unit=0 --speed=115200\nterminal_input console serial\nterminal_output console serial\n" +
		"menuentry \"ramdisk deploy\" {\n\tlinux /boot/vmlinuz " + params + "\n\tinitrd /boot/initrd\n}\n"
	if err := os.WriteFile(filepath.Join(tree, "boot", "grub", "grub.cfg"), []byte(cfg), 0o600); err != nil {
		return "", err
	}
	out := filepath.Join(work, "boot.iso")
	cmd := exec.CommandContext(ctx, tool, "-o", out, tree)
	if msg, err := cmd.CombinedOutput(); err != nil {
		tail := strings.TrimSpace(string(msg))
		if len(tail) > 400 {
			tail = tail[len(tail)-400:]
		}
		return "", fmt.Errorf("grub-mkrescue failed to build the boot ISO: %v: %s", err, tail)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	iso := &builtISO{token: hex.EncodeToString(tok), path: filepath.Join(dir, key+".iso"), at: time.Now()}
	if err := os.Rename(out, iso.path); err != nil {
		return "", err
	}
	b.mu.Lock()
	b.byKey[key], b.byToken[iso.token] = iso, iso
	for len(b.byKey) > MaxBuiltISOs {
		var oldK string
		var old *builtISO
		for k, x := range b.byKey {
			if old == nil || x.at.Before(old.at) {
				oldK, old = k, x
			}
		}
		delete(b.byKey, oldK)
		delete(b.byToken, old.token)
		_ = os.Remove(old.path)
	}
	b.mu.Unlock()
	sc.log.Info("boot ISO built of a kernel and a ramdisk", "kernel", imagecache.Redact(kernel), "ramdisk", imagecache.Redact(ramdisk))
	return sc.builtBase + iso.token + ".iso", nil
}

// copyCached fetches src into the cache (no checksum: Ironic's kernel
// and ramdisk of a ramdisk deploy have none) and copies it to path.
func (sc *Cache) copyCached(ctx context.Context, src, path string) error {
	if _, err := sc.c.Fetch(ctx, src, imagecache.Unverified); err != nil {
		return err
	}
	token, err := sc.c.Register(src, imagecache.Unverified)
	if err != nil {
		return err
	}
	r, err := sc.c.OpenToken(ctx, token)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, MaxBootFileBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > MaxBootFileBytes {
		err = fmt.Errorf("larger than %d bytes", int64(MaxBootFileBytes))
	}
	return err
}
