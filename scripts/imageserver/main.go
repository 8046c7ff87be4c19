// Command imageserver is the image server of `make run`: it serves the
// files of one folder over HTTP on loopback, read-only, so that the
// simulated site's image cache fetches the walk-through's image from it
// as a real site's cache fetches from an image server on the WAN.
//
// With --make NAME it first writes a small raw disk image of that name
// into the folder (an MBR with one Linux partition; kept when it is
// there already), and with --env-file FILE it writes the image's URL and
// sha256 as shell variables (IMAGE_SOURCE, IMAGE_CHECKSUM) for
// `. FILE` once it is listening.
//
//	imageserver --dir build/run/images --make demo.raw --env-file build/run/image.env
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/lib/netbudget"
)

func main() {
	fs := flag.NewFlagSet("imageserver", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: imageserver --dir DIR [--listen ADDR] [--make NAME [--size BYTES]] [--env-file FILE]

Serves the files of DIR over HTTP (GET and HEAD, with ranges) on a loopback
address, for make run: the site's image cache fetches the images from here.

`)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:6391", "`ADDR` (host:port) to serve on; loopback only (127.0.0.0/8, ::1, localhost): this server has no authentication")
	dir := fs.String("dir", "", "`DIR` whose files are served, by name (required; created 0755 if missing)")
	mk := fs.String("make", "", "write a small raw disk image `NAME` into DIR first (an MBR with one Linux partition), unless DIR/NAME exists (default: none)")
	size := fs.Int64("size", 4<<20, "size in `BYTES` of the image --make writes (a multiple of 512, at least 2 MiB)")
	envFile := fs.String("env-file", "", "with --make: once listening, write `FILE` with IMAGE_SOURCE=URL and IMAGE_CHECKSUM=sha256:HEX of the image, for '. FILE' in a shell (default: none)")
	_ = fs.Parse(os.Args[1:])
	if err := run(*listen, *dir, *mk, *size, *envFile); err != nil {
		fmt.Fprintln(os.Stderr, "imageserver: error:", err)
		os.Exit(1)
	}
}

func run(listen, dir, mk string, size int64, envFile string) error {
	if dir == "" {
		return errors.New("--dir is required: the folder whose files are served")
	}
	if !netbudget.LoopbackAddr(listen) {
		return fmt.Errorf("--listen %s is not a loopback address; this server has no authentication: give 127.0.0.1:PORT (or another 127.x address)", listen)
	}
	if envFile != "" && mk == "" {
		return errors.New("--env-file names the image of --make: give --make NAME too")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sum string
	if mk != "" {
		if mk != filepath.Base(mk) || strings.HasPrefix(mk, ".") {
			return fmt.Errorf("--make %q: give a plain file name (it is written into --dir)", mk)
		}
		var err error
		if sum, err = makeImage(filepath.Join(dir, mk), size); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w (another make run? give IMAGE_SERVER=127.0.0.1:PORT)", listen, err)
	}
	base := "http://" + ln.Addr().String() + "/"
	if envFile != "" {
		env := fmt.Sprintf("# The image make run serves (scripts/imageserver), for '. %s'.\nIMAGE_SOURCE=%s%s\nIMAGE_CHECKSUM=sha256:%s\n", envFile, base, mk, sum)
		if err := writeAtomic(envFile, []byte(env), 0o644); err != nil {
			return err
		}
	}
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.Printf("serving %s at %s", dir, base)
	srv := &http.Server{Handler: files(dir), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// files serves the regular files directly in dir, by name, and logs each
// request with its answer.
func files(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			log.Printf("%s %s: 404 (not a file name)", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			log.Printf("%s %s: 404", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			log.Printf("%s %s: 404 (not a regular file)", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		log.Printf("%s %s: %d bytes", r.Method, r.URL.Path, st.Size())
		http.ServeContent(w, r, name, st.ModTime(), f)
	})
}

// makeImage writes a raw disk image of size bytes at path unless a file
// is there already, and returns the sha256 hex of the file.
func makeImage(path string, size int64) (string, error) {
	if _, err := os.Stat(path); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if size%512 != 0 || size < 2<<20 {
			return "", fmt.Errorf("--size %d: give a multiple of 512 of at least 2 MiB (2097152)", size)
		}
		if err := writeAtomic(path, diskImage(size), 0o644); err != nil {
			return "", err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// diskImage is a raw disk: an MBR whose one partition (type 0x83, Linux)
// starts at sector 2048 and fills the disk, and the partition's bytes a
// text line repeated, so that the image is always the same.
func diskImage(size int64) []byte {
	b := make([]byte, size)
	const start = 2048
	sectors := uint32(size/512) - start
	e := b[446:462]
	e[0] = 0x00                            // not bootable
	copy(e[1:4], []byte{0xfe, 0xff, 0xff}) // CHS start: use LBA
	e[4] = 0x83
	copy(e[5:8], []byte{0xfe, 0xff, 0xff}) // CHS end: use LBA
	binary.LittleEndian.PutUint32(e[8:12], start)
	binary.LittleEndian.PutUint32(e[12:16], sectors)
	b[510], b[511] = 0x55, 0xaa
	line := []byte("bmedge make run demo image: a raw disk with one partition\n")
	for off := int64(start * 512); off < size; off += int64(len(line)) {
		copy(b[off:], line)
	}
	return b
}

func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
