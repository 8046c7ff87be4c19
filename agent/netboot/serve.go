package netboot

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pin/tftp/v3"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// maxTransfers bounds the TFTP transfers and the HTTP downloads of the
// ramdisk that run at once.
const maxTransfers = 64

// startTFTP serves the iPXE binaries, Debian's signed shim and GRUB and
// each Secure Boot boot's GRUB configuration, read-only; nothing else
// exists.
func (s *Server) startTFTP() error {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: s.cfg.Address, Port: max(s.cfg.TFTPPort, 0)})
	if err != nil {
		return fmt.Errorf("network boot TFTP on %s:%d: %w", s.cfg.Address, s.cfg.TFTPPort, err)
	}
	s.cfg.TFTPPort = conn.LocalAddr().(*net.UDPAddr).Port
	slots := make(chan struct{}, maxTransfers)
	srv := tftp.NewServer(func(name string, rf io.ReaderFrom) error {
		return s.tftpRead(name, rf, slots)
	}, nil)
	srv.SetTimeout(5 * time.Second)
	srv.SetRetries(5)
	s.onClose(srv.Shutdown)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(conn); err != nil {
			s.log.Error("network boot TFTP stopped", "err", err)
		}
	}()
	return nil
}

func (s *Server) tftpRead(name string, rf io.ReaderFrom, slots chan struct{}) error {
	remote := ""
	var rip net.IP
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		a := ot.RemoteAddr()
		remote, rip = a.String(), a.IP
	}
	name = strings.TrimPrefix(name, "/")
	secure := false
	// GRUB loads the ramdisk by TFTP (Debian's signed network GRUB has no
	// HTTP): boot/TOKEN/vmlinuz and boot/TOKEN/initrd, as over HTTP.
	token := ""
	if rest, ok := strings.CutPrefix(name, "boot/"); ok {
		if tok, file, ok := strings.Cut(rest, "/"); ok && len(tok) == 32 && (file == "vmlinuz" || file == "initrd") {
			token, name = tok, file
		}
	}
	switch {
	case token != "":
		secure = true
	case name == BIOSBinary || name == UEFIBinary:
	case name == ShimBinary || name == GRUBBinary || name == GRUBConfig:
		secure = true
	default:
		// The name is not logged: it may hold a boot's token.
		s.log.Debug("network boot TFTP: refused a file that is not a boot file", "remote", remote)
		return fmt.Errorf("no such file")
	}
	// Only a MAC being booted gets the binary. In DHCP mode the agent
	// knows who holds each address (its leases); in proxy mode another
	// server leased it, and the address's neighbour entry says whose it
	// is, as for the HTTP files.
	var hw net.HardwareAddr
	ok := false
	if s.cfg.Mode == ModeDHCP {
		var mac string
		if mac, ok = s.leases.macOf(rip); ok {
			var err error
			hw, err = net.ParseMAC(mac)
			ok = err == nil
		}
	} else {
		hw, ok = s.cfg.macOf(rip)
	}
	var a *armed
	if ok {
		a = s.bootOfMAC(hw)
	}
	if a == nil {
		s.log.Info("network boot TFTP: refused an address that no booting node holds", "remote", remote, "file", name, "mac", hw.String())
		return fmt.Errorf("not booting")
	}
	if secure && !a.SecureBoot {
		s.log.Info("network boot TFTP: refused the Secure Boot chain to a boot armed without it", "node", a.Node, "remote", remote, "file", name)
		return fmt.Errorf("no such file")
	}
	if token != "" && token != a.token {
		s.log.Warn("network boot TFTP: a boot's files asked for by another node's address, or after the boot ended", "node", a.Node, "remote", remote, "file", name)
		return fmt.Errorf("no such file")
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		return fmt.Errorf("busy")
	}
	var src io.Reader
	var size int64
	switch name {
	case GRUBConfig:
		b := s.grubConfig(a)
		src, size = bytes.NewReader(b), int64(len(b))
	default:
		path := filepath.Join(s.cfg.IPXEDir, name)
		switch {
		case token != "" && name == "vmlinuz":
			path = s.cfg.Kernel
		case token != "":
			path = s.cfg.Initrd
		case secure:
			path = filepath.Join(s.cfg.ShimDir, name)
		}
		f, err := os.Open(path)
		if err != nil {
			s.log.Error("network boot TFTP: boot loader", "err", err)
			return fmt.Errorf("unavailable")
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("unavailable")
		}
		src, size = f, st.Size()
	}
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		ot.SetSize(size)
	}
	n, err := rf.ReadFrom(src)
	if err != nil && strings.Contains(err.Error(), "aborted") {
		// UEFI PXE clients ask for the size first and abort.
		s.log.Debug("network boot TFTP: the client read the size only", "remote", remote, "file", name)
		return err
	}
	if err != nil {
		s.log.Warn("network boot TFTP: transfer failed", "remote", remote, "file", name, "bytes", n, "err", err)
		return err
	}
	s.log.Info("network boot TFTP: sent", "remote", remote, "file", name, "bytes", n, "node", a.Node)
	return nil
}

// grubConfig is the GRUB configuration of a Secure Boot boot: the kernel
// and the initramfs by TFTP from the boot's path (Debian's signed network
// GRUB has no HTTP), each word of the command line quoted for GRUB (GRUB
// joins them with spaces, and would put a word holding a space in double
// quotes, which the kernel reads as one parameter). GRUB's linux verifies
// the kernel's signature through shim.
func (s *Server) grubConfig(a *armed) []byte {
	base := "(tftp," + s.cfg.Address.String() + ")/boot/" + a.token
	var b bytes.Buffer
	fmt.Fprintf(&b, "set timeout=0\n")
	fmt.Fprintf(&b, "echo %s\n", grubQuote("bmedge: booting the ramdisk of node "+a.Node))
	words := strings.Fields(a.Cmdline)
	for i, w := range words {
		words[i] = grubQuote(w)
	}
	fmt.Fprintf(&b, "if linux %s/vmlinuz %s; then\n", base, strings.Join(words, " "))
	fmt.Fprintf(&b, "  if initrd %s/initrd; then\n    boot\n  fi\nfi\n", base)
	// As the iPXE script: back to the firmware, which goes on to its
	// next boot device.
	fmt.Fprintf(&b, "echo 'bmedge: the ramdisk did not boot; back to the firmware'\nexit 1\n")
	return b.Bytes()
}

// grubQuote quotes a word for GRUB's script: within single quotes every
// character stands for itself; a single quote ends the quotes, is escaped
// and reopens them.
func grubQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

func (s *Server) startHTTP() error {
	port := s.cfg.HTTPPort
	if port < 0 {
		port = 0
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(s.cfg.Address.String(), strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("network boot HTTP: %w", err)
	}
	s.httpURL = "http://" + ln.Addr().String()
	bl := netbudget.Default().Wrap(ln, netbudget.Options{Name: "netboot-http", Limits: s.cfg.HTTPConns, Log: s.log})
	srv := &http.Server{Handler: &httpHandler{s: s, slots: make(chan struct{}, maxTransfers)},
		ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10, IdleTimeout: time.Minute, ConnState: netbudget.ConnState(nil)}
	s.onClose(func() { srv.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(bl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("network boot HTTP stopped", "err", err)
		}
	}()
	return nil
}

func (s *Server) scriptURL(a *armed) string { return s.httpURL + "/boot/" + a.token + "/boot.ipxe" }

// Script is the iPXE script of a boot.
func (s *Server) script(a *armed) []byte {
	base := s.httpURL + "/boot/" + a.token
	var b bytes.Buffer
	fmt.Fprintf(&b, "#!ipxe\n")
	fmt.Fprintf(&b, "echo bmedge: booting the ramdisk of node %s\n", a.Node)
	fmt.Fprintf(&b, "kernel %s/vmlinuz initrd=initrd %s || goto failed\n", base, a.Cmdline)
	fmt.Fprintf(&b, "initrd --name initrd %s/initrd || goto failed\n", base)
	fmt.Fprintf(&b, "boot || goto failed\n")
	// "exit" is in every iPXE build (sleep and reboot are build options):
	// the firmware goes on to its next boot device or tries again.
	fmt.Fprintf(&b, ":failed\necho bmedge: the ramdisk did not boot; back to the firmware\nexit 1\n")
	return b.Bytes()
}

type httpHandler struct {
	s     *Server
	slots chan struct{}
}

// ServeHTTP serves /boot/TOKEN/{boot.ipxe,vmlinuz,initrd} of an armed
// boot to its node's MACs only; everything else is 404.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/boot/")
	tok, file, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || len(tok) != 32 {
		http.NotFound(w, r)
		return
	}
	a := s.bootOfToken(tok)
	if a == nil {
		// The log never shows the path: it is the script's password.
		s.log.Warn("network boot HTTP: request for an unknown or ended boot", "remote", r.RemoteAddr)
		http.NotFound(w, r)
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	mac, known := s.cfg.macOf(net.ParseIP(host))
	if !known || !hasMAC(a.MACs, mac) {
		s.log.Warn("network boot HTTP: a boot's files asked for from an address that is not the node's", "node", a.Node, "remote", r.RemoteAddr, "mac", mac.String())
		http.NotFound(w, r)
		return
	}
	switch file {
	case "boot.ipxe":
		s.log.Info("network boot HTTP: script served", "node", a.Node, "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		http.ServeContent(w, r, "boot.ipxe", a.created, bytes.NewReader(s.script(a)))
	case "vmlinuz", "initrd":
		path := s.cfg.Kernel
		if file == "initrd" {
			path = s.cfg.Initrd
		}
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
		default:
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		f, err := os.Open(path)
		if err != nil {
			s.log.Error("network boot HTTP: ramdisk file", "err", err)
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		s.log.Info("network boot HTTP: "+file+" served", "node", a.Node, "remote", r.RemoteAddr, "bytes", st.Size())
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, file, st.ModTime(), f)
	default:
		http.NotFound(w, r)
	}
}

func hasMAC(list []net.HardwareAddr, m net.HardwareAddr) bool {
	for _, x := range list {
		if bytes.Equal(x, m) {
			return true
		}
	}
	return false
}

// neighbourMAC looks an IPv4 address up in the kernel's ARP table
// (/proc/net/arp) on one interface.
func neighbourMAC(ifname string, ip net.IP) (net.HardwareAddr, bool) {
	if ip.To4() == nil {
		return nil, false
	}
	f, err := os.Open("/proc/net/arp")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	return parseARP(f, ifname, ip)
}

// parseARP reads /proc/net/arp: "IP address HW type Flags HW address Mask
// Device"; only complete entries (flag 0x2) count.
func parseARP(r io.Reader, ifname string, ip net.IP) (net.HardwareAddr, bool) {
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[5] != ifname || !net.ParseIP(f[0]).Equal(ip) {
			continue
		}
		flags, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 32)
		if err != nil || flags&0x2 == 0 {
			continue
		}
		m, err := net.ParseMAC(f[3])
		if err != nil {
			continue
		}
		return m, true
	}
	return nil, false
}
