package sim

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/bmedge/bmedge/agent/imagecache"
	"github.com/bmedge/bmedge/lib/fetchwords"
	"github.com/bmedge/bmedge/lib/imagechecksum"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/lldp"
	"github.com/bmedge/bmedge/lib/session"
	"github.com/bmedge/bmedge/protocol"
)

// simRunner is the hardware of a simulated node: its in-band steps take
// StepDuration, can be made to fail or to kill the agent, and inspection
// reports a plausible inventory. The protocol around it is the real
// ramdisk's (lib/session).
type simRunner struct {
	s    *Sim
	node string
	opts Options
	// boot is which of the node's ramdisk boots this is (Sim.boots).
	boot uint64
	// reboot restarts the node's simulated ramdisk as a new boot.
	reboot func()
}

func wire(steps []drivers.Step) []protocol.Step {
	out := make([]protocol.Step, 0, len(steps))
	for _, s := range steps {
		out = append(out, protocol.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable})
	}
	return out
}

// Steps implements session.Runner.
func (r *simRunner) Steps() (clean, deploy []protocol.Step) {
	return wire(drivers.InbandCleanSteps()), wire(drivers.InbandDeploySteps())
}

// Run implements session.Runner.
func (r *simRunner) Run(ctx context.Context, step protocol.Step, progress func(float64, string)) (map[string]any, error) {
	name := step.Step
	if w := r.opts.StepWatch; w != nil {
		w(r.node, r.boot, step.Interface+"."+name)
	}
	if name == r.opts.DieStep || name == r.opts.RebootStep {
		r.sleep(ctx, r.opts.StepDuration/2)
		if name == r.opts.RebootStep && ctx.Err() == nil {
			r.reboot()
		}
		return nil, session.ErrDied
	}
	switch step.Interface + "." + name {
	case "deploy.erase_devices", "deploy.erase_devices_metadata", "deploy.write_image", "deploy.inspect_hardware", "rescue.finalize_rescue":
	default:
		// The other standard steps (burn-in, express erase...) only tick.
		if _, ok := drivers.Standard(step.Interface, name); !ok {
			return nil, fmt.Errorf("the ramdisk has no step %s.%s", step.Interface, name)
		}
	}
	if step.Interface == "deploy" && name == "burnin_network" {
		// No traffic is simulated, but the pairing is refused as the
		// real ramdisk refuses it.
		if _, err := drivers.NetworkBurninArgs(step.Args); err != nil {
			return nil, fmt.Errorf("burnin_network: %w", err)
		}
		if _, _, _, err := drivers.NetworkBurninPair(step.Args); err != nil {
			return nil, err
		}
	}
	if name == "write_image" {
		if err := r.s.writeImage(ctx, step.Args); err != nil {
			return nil, err
		}
	}
	const ticks = 10
	// A step a restarted agent's simulated ramdisk goes on with has run
	// for part of its time already (real time: the agent was down).
	done := 0
	if started, ok := session.StartedAt(ctx); ok && r.opts.StepDuration > 0 {
		done = min(int(time.Since(started)*ticks/r.opts.StepDuration), ticks)
	}
	for i := done + 1; i <= ticks; i++ {
		if r.opts.StepDuration > 0 && !r.sleep(ctx, r.opts.StepDuration/ticks) {
			return nil, ctx.Err()
		}
		progress(float64(i)/ticks, "")
	}
	if name == r.opts.FailStep {
		if r.opts.FailText != "" {
			return nil, errors.New(r.opts.FailText)
		}
		return nil, fmt.Errorf("simulated failure of step %s", name)
	}
	if name == "inspect_hardware" {
		return r.inventory(), nil
	}
	if step.Interface == "rescue" && name == "finalize_rescue" {
		return r.finalizeRescue(step.Args)
	}
	return nil, nil
}

// sleep waits d on the sim's clock; false if ctx ended first.
func (r *simRunner) sleep(ctx context.Context, d time.Duration) bool {
	t := r.s.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// inventory is a plausible hardware report, stable per node; its NICs
// are the node's enrolled ports' MACs (opts.MACs, from the boot
// command), else one of a MAC made from the node's name.
func (r *simRunner) inventory() map[string]any {
	h := 0
	for _, c := range r.node {
		h = h*31 + int(c)
	}
	if h < 0 {
		h = -h
	}
	cpus := 8 << (h % 3)
	memMB := 16384 << (h % 4)
	diskGB := 480 << (h % 3)
	mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", (h>>16)&0xff, (h>>8)&0xff, h&0xff)
	// The NICs are QEMU's e1000 (PCI 8086:100e), as the ramdisk reads
	// vendor and product from sysfs.
	nics := []any{map[string]any{"name": "eth0", "mac_address": mac, "has_carrier": true, "vendor": "0x8086", "product": "0x100e"}}
	if len(r.opts.MACs) > 0 {
		nics = nil
		for i, m := range r.opts.MACs {
			nics = append(nics, map[string]any{"name": fmt.Sprintf("eth%d", i), "mac_address": m, "has_carrier": true, "vendor": "0x8086", "product": "0x100e"})
		}
	}
	if r.opts.LLDP {
		r.simLLDP(nics, h)
	}
	short := r.node
	if len(short) > 8 {
		short = short[:8]
	}
	return map[string]any{
		"inventory": map[string]any{
			"cpu":           map[string]any{"count": cpus, "architecture": "x86_64", "model_name": "Simulated CPU"},
			"memory":        map[string]any{"total_bytes": int64(memMB) << 20, "physical_mb": memMB},
			"disks":         []any{map[string]any{"name": "/dev/sda", "size": int64(diskGB) << 30, "rotational": false, "serial": "SIM" + short}},
			"interfaces":    nics,
			"system_vendor": map[string]any{"manufacturer": "bmedge", "product_name": "simulated node", "serial_number": short},
			"boot":          map[string]any{"current_boot_mode": "uefi"},
		},
		"properties": map[string]any{"cpus": cpus, "memory_mb": memMB, "local_gb": diskGB - 1, "cpu_arch": "x86_64"},
	}
}

// writeImage is a simulated ramdisk's write_image up to the disk. On a
// site with an image cache (make run's, the benchmark's) it does what the
// real ramdisk (ramdisk/steps, ramdisk/image) does where an operator can
// see it: it needs image_source and a sha256, sha384 or sha512 checksum (md5 or
// sha1 when the coordinator allows them: allow_md5_checksum), downloads
// the image (from the site cache, when the agent took the image through
// it, else from its origin) and verifies it; each refusal or failure is
// the step's error, so the deploy's last_error. On a site without an
// image cache (the test rigs, make soak) the simulated nodes have no
// network: the image is not fetched.
func (s *Sim) writeImage(ctx context.Context, args map[string]any) error {
	w := protocol.WriteImageArgsOf(args)
	src := w.ImageSource
	if src == "" {
		return errors.New("write_image needs instance_info/image_source")
	}
	base := s.cfg.CacheBase()
	if base == "" {
		return nil
	}
	// A config drive the agent passes through its site cache is fetched
	// (and dropped) first: its refusal is the step's error, as the real
	// ramdisk's (ramdisk/configdrive) would be.
	if cd := w.ConfigDrive; cd != "" && strings.HasPrefix(cd, strings.TrimSuffix(base, "/images/")+"/configdrive/") {
		if err := simFetchDrive(ctx, cd); err != nil {
			return err
		}
	}
	// The ramdisk's rule on checksums (ramdisk/steps writeImage and
	// ramdisk/image checksumSetup): os_hash_value wins over
	// image_checksum; one is required; sha256, sha384 or sha512, md5 and sha1
	// only when the coordinator allows them (allow_md5_checksum).
	sum, algo := w.Checksum()
	digest := strings.TrimSpace(sum)
	if _, d, ok := strings.Cut(digest, ":"); ok {
		digest = strings.TrimSpace(d)
	}
	if digest == "" {
		return errors.New("no image checksum given; pass the image's sha256 or sha512 (Ironic image_checksum / os_hash_value)")
	}
	c, err := imagechecksum.ParseDigest(sum, algo)
	if err != nil {
		return err
	}
	switch c.Algo {
	case imagechecksum.SHA256, imagechecksum.SHA384, imagechecksum.SHA512:
	case imagechecksum.MD5, imagechecksum.SHA1:
		if !w.AllowMD5Checksum {
			return fmt.Errorf("image checksum %q is %s, which is taken only when the operator allows it (coordinator serve --allow-md5-checksum, Ironic's [agent]allow_md5_checksum); give a sha256 or sha512 digest", sum, c.Algo)
		}
	default:
		return fmt.Errorf("checksum algorithm %q is not supported; use sha256, sha384 or sha512", c.Algo)
	}
	if strings.HasPrefix(src, base) {
		return s.FetchImage(ctx, src, args)
	}
	return simFetchOrigin(ctx, src, imagecache.Checksum{Algo: c.Algo, Hex: c.Hex})
}

// simClient fetches images from their origin as the ramdisk's client does.
var simClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	DisableCompression:    true,
}}

// simFetchOrigin downloads an image that did not go through the site
// cache from its origin and verifies it, with the ramdisk's messages.
func simFetchOrigin(ctx context.Context, src string, sum imagecache.Checksum) error {
	shown := imagecache.Redact(src)
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return fmt.Errorf("image URL %q is not http:// or https://; give an HTTP(S) URL", shown)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return fmt.Errorf("invalid image URL %q", shown)
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := simClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot fetch image %s from its origin %s: %s; check the image URL and that its server is reachable from the node's network", shown, fetchwords.Host(src), fetchwords.Cause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, fetchwords.MaxReasonBytes))
		return fmt.Errorf("%s; check instance_info image_source and the origin", fetchwords.Answer(resp.StatusCode, b, "image", shown))
	}
	h := imagecache.NewHash(sum)
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		return fmt.Errorf("image download from %s was cut after %d bytes (%w)", shown, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("image %s is truncated: %d of %d bytes", shown, n, resp.ContentLength)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum.Hex {
		return mismatch(shown, sum)
	}
	return nil
}

// FetchImage is what a simulated ramdisk's write_image does with its
// image: when its image_source is the site cache of this process (the
// agent took the image through its cache), it downloads it as a real
// ramdisk would and verifies the checksum, so that simulated deploys
// exercise the cache. writeImage calls it, after the ramdisk's checksum
// rule, and fetches any other URL from its origin.
func (s *Sim) FetchImage(ctx context.Context, url string, args map[string]any) error {
	if base := s.cfg.CacheBase(); base == "" || !strings.HasPrefix(url, base) {
		return nil
	}
	str := func(k string) string { v, _ := args[k].(string); return v }
	sum, err := imagecache.ParseChecksum(str("image_checksum"), str("image_os_hash_algo"), str("image_os_hash_value"))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot download the image from the site cache: %w", err)
	}
	defer resp.Body.Close()
	if err := cacheRefused(resp); err != nil {
		return fmt.Errorf("cannot download image %s: %w", imagecache.Redact(url), err)
	}
	h := imagecache.NewHash(sum)
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		err = fmt.Errorf("image download from the site cache was cut after %d bytes (%w)", n, err)
		// As a ramdisk that retries would: the cache remembers why its
		// download failed for a while and says so.
		if again, aerr := http.DefaultClient.Do(req.Clone(ctx)); aerr == nil {
			if why := cacheRefused(again); why != nil {
				err = fmt.Errorf("%w; %w", err, why)
			}
			again.Body.Close()
		}
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum.Hex {
		return mismatch(imagecache.Redact(url), sum)
	}
	return nil
}

// mismatch is the real ramdisk's checksum mismatch (ramdisk/image): the
// checksum given, never the digest of what came back.
func mismatch(shown string, sum imagecache.Checksum) error {
	return fmt.Errorf("checksum mismatch for image %s: its %s is not the %s given; the simulated disk now holds an unverified image, do not boot it: fix the image at its origin or the checksum in instance_info and write again", shown, sum.Algo, sum.Hex)
}

// simFetchDrive downloads a config drive from the site cache and drops
// it.
func simFetchDrive(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot download the config drive from the site cache: %w", err)
	}
	defer resp.Body.Close()
	if err := cacheRefused(resp); err != nil {
		return fmt.Errorf("cannot download the config drive: %w", err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// cacheRefused is the error of a cache answer that is not the image: its
// reason, or its status in words, as the real ramdisk says it.
func cacheRefused(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, fetchwords.MaxReasonBytes))
	if why := fetchwords.CacheReason(b); why != "" {
		return errors.New(why)
	}
	return fmt.Errorf("the site cache did not answer with the file (not 200 OK: %s)", fetchwords.Status(resp.StatusCode))
}

// simLLDP gives each NIC the LLDP frame of its site's simulated switch:
// one chassis per site, the node's NICs on ports of it.
func (r *simRunner) simLLDP(nics []any, h int) {
	site := r.s.cfg.Site
	sh := 0
	for _, c := range site {
		sh = sh*31 + int(c)
	}
	chassis := net.HardwareAddr{0x02, 0x00, 0x5e, byte(sh >> 16), byte(sh >> 8), byte(sh)}
	for i, x := range nics {
		port := fmt.Sprintf("Ethernet%d/%d", i+1, h%48+1)
		x.(map[string]any)["lldp"] = lldp.Raw(lldp.Basic(chassis, port, "to "+r.node, "sim-switch-"+site))
	}
}
