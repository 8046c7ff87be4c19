package image

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// testImage returns size bytes that look like a disk image: stretches of
// zeros between random data, so that compression does something.
func testImage(size int) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, size)
	for i := 0; i < size; i += 64 << 10 {
		if (i/(64<<10))%2 == 0 {
			end := min(i+(64<<10), size)
			for j := i; j < end; j++ {
				b[j] = byte(r.Uint32())
			}
		}
	}
	return b
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zstded(b []byte) []byte {
	w, _ := zstd.NewWriter(nil)
	return w.EncodeAll(b, nil)
}

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func sha512hex(b []byte) string { s := sha512.Sum512(b); return hex.EncodeToString(s[:]) }
func sha384hex(b []byte) string { s := sha512.Sum384(b); return hex.EncodeToString(s[:]) }

// imageServer serves files by path and a few broken behaviours.
func imageServer(t testing.TB, files map[string][]byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		kind, file, _ := strings.Cut(name, "/")
		body, ok := files[file]
		if !ok {
			http.NotFound(w, r)
			return
		}
		switch kind {
		case "ok":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case "cut": // promises the full length, sends half, drops the connection
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "cutchunked": // no length: chunked encoding, aborted midway
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "stall": // sends half, then nothing
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// targetFile makes a size-byte file of 0xFF bytes standing in for a disk.
func targetFile(t testing.TB, size int) disk.Device {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target.img")
	if err := os.WriteFile(p, bytes.Repeat([]byte{0xFF}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := disk.FromPath(p, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWrite(t *testing.T) {
	img := testImage(3<<20 + 777)
	gz, zs := gzipped(img), zstded(img)
	srv := imageServer(t, map[string][]byte{
		"img.raw": img, "img.gz": gz, "img.zst": zs,
		"qcow.img": append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 1000)...),
		"xz.img":   append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 100)...),
		"empty":    {},
	})
	big := testImage(9 << 20)
	srvBig := imageServer(t, map[string][]byte{"big.raw": big, "big.gz": gzipped(big)})

	cases := []struct {
		name     string
		url      string
		opts     Options
		target   int // target size; default 8 MiB
		wantErr  string
		wantNot  string // what the error must not say (a digest of what came back, a status line)
		wantComp string
	}{
		{name: "raw sha256", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img)}, wantComp: CompressionNone},
		{name: "gzip sha512 (checksum of compressed file)", url: srv.URL + "/ok/img.gz", opts: Options{Checksum: sha512hex(gz)}, wantComp: CompressionGzip},
		{name: "raw sha384 (Glance's os_hash_algo)", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha384hex(img), ChecksumAlgo: "sha384"}, wantComp: CompressionNone},
		{name: "sha384 mismatch", url: srv.URL + "/ok/img.gz", opts: Options{Checksum: "sha384:" + sha384hex(img)},
			wantErr: "its sha384 is not the " + sha384hex(img) + " given", wantNot: sha384hex(gz)},
		{name: "zstd with algo prefix", url: srv.URL + "/ok/img.zst", opts: Options{Checksum: "SHA256:" + strings.ToUpper(sha256hex(zs))}, wantComp: CompressionZstd},
		{name: "explicit algo", url: srv.URL + "/ok/img.gz", opts: Options{Checksum: sha256hex(gz), ChecksumAlgo: "sha256"}, wantComp: CompressionGzip},
		{name: "no checksum allowed explicitly", url: srv.URL + "/ok/img.raw", opts: Options{InsecureSkipChecksum: true}, wantComp: CompressionNone},

		{name: "checksum mismatch names the checksum given, not the digest received", url: srv.URL + "/ok/img.gz", opts: Options{Checksum: sha256hex(img)},
			wantErr: "checksum mismatch for image " + srv.URL + "/ok/img.gz: its sha256 is not the " + sha256hex(img) + " given", wantNot: sha256hex(gz)},
		{name: "no checksum", url: srv.URL + "/ok/img.raw", wantErr: "no image checksum given"},
		{name: "md5 refused", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: strings.Repeat("a", 32)}, wantErr: "md5"},
		{name: "algo/length disagree", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), ChecksumAlgo: "sha512"}, wantErr: "is not a sha512 digest: want 128 hex digits"},
		{name: "404 in words", url: srv.URL + "/ok/missing", opts: Options{Checksum: sha256hex(img)},
			wantErr: "the origin " + strings.TrimPrefix(srv.URL, "http://") + " of image " + srv.URL + "/ok/missing did not answer with the image (not 200 OK: not found)", wantNot: "Not Found"},
		{name: "connection cut (content-length)", url: srv.URL + "/cut/img.raw", opts: Options{Checksum: sha256hex(img)}, wantErr: "unexpected EOF"},
		{name: "connection cut (chunked raw)", url: srv.URL + "/cutchunked/img.raw", opts: Options{Checksum: sha256hex(img)}, wantErr: "unexpected EOF"},
		{name: "connection cut (chunked gzip)", url: srv.URL + "/cutchunked/img.gz", opts: Options{Checksum: sha256hex(gz)}, wantErr: "unexpected EOF"},
		{name: "connection cut (zstd)", url: srv.URL + "/cut/img.zst", opts: Options{Checksum: sha256hex(zs)}, wantErr: "unexpected EOF"},
		{name: "stalled server", url: srv.URL + "/stall/img.raw", opts: Options{Checksum: sha256hex(img), StallTimeout: 300 * time.Millisecond}, wantErr: "no data received for 300ms"},
		{name: "raw image larger than device (known before writing)", url: srvBig.URL + "/ok/big.raw", opts: Options{Checksum: sha256hex(big)}, wantErr: "is larger than"},
		{name: "gzip image larger than device (found while writing)", url: srvBig.URL + "/ok/big.gz", opts: Options{InsecureSkipChecksum: true}, wantErr: "is larger than"},
		{name: "qcow2 with an invalid header", url: srv.URL + "/ok/qcow.img", opts: Options{InsecureSkipChecksum: true}, wantErr: "qcow2 header's cluster size 2^0 is invalid"},
		{name: "xz refused", url: srv.URL + "/ok/xz.img", opts: Options{InsecureSkipChecksum: true}, wantErr: "xz"},
		{name: "empty image", url: srv.URL + "/ok/empty", opts: Options{InsecureSkipChecksum: true}, wantErr: "empty"},
		{name: "not http", url: "ftp://example/img", opts: Options{InsecureSkipChecksum: true}, wantErr: "not http"},
		{name: "short write", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), Open: shortWriter}, wantErr: "short write"},
		{name: "write error", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), Open: failingWriter}, wantErr: "input/output error"},
		{name: "device cannot be opened", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), Open: unopenable}, wantErr: "cannot open"},
		{name: "buffered (NoDirect)", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), NoDirect: true}, wantComp: CompressionNone},
		{name: "small buffers, two of them (raw)", url: srv.URL + "/ok/img.raw", opts: Options{Checksum: sha256hex(img), BufferBytes: 60000, Buffers: 1}, wantComp: CompressionNone},
		{name: "small buffers (gzip)", url: srv.URL + "/ok/img.gz", opts: Options{Checksum: sha256hex(gz), BufferBytes: 64 << 10, Buffers: 3}, wantComp: CompressionGzip},
		{name: "connection cut, small buffers", url: srv.URL + "/cut/img.raw", opts: Options{Checksum: sha256hex(img), BufferBytes: 64 << 10}, wantErr: "unexpected EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := c.target
			if size == 0 {
				size = 8 << 20
			}
			dev := targetFile(t, size)
			var last Progress
			c.opts.Progress = func(p Progress) { last = p }
			res, err := Write(t.Context(), Source{URL: c.url}, dev, c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, c.wantErr)
				}
				if c.wantNot != "" && strings.Contains(err.Error(), c.wantNot) {
					t.Fatalf("err = %v, must not contain %q", err, c.wantNot)
				}
				t.Logf("error: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(dev.Path)
			if !bytes.Equal(got[:len(img)], img) {
				t.Fatal("device content differs from the image")
			}
			if got[len(img)] != 0xFF || got[len(got)-1] != 0xFF {
				t.Fatal("bytes past the image were changed")
			}
			if res.Compression != c.wantComp || res.Written != uint64(len(img)) || res.Reread != "not a block device" {
				t.Errorf("result = %+v", res)
			}
			if last.Written != uint64(len(img)) || last.Downloaded == 0 || last.DownloadTotal != last.Downloaded {
				t.Errorf("last progress = %+v", last)
			}
		})
	}
}

// TestFetchErrorsInWords: an image URL may name any server the node
// reaches, so what the error tells of the answer is the host and what
// went wrong in words: not a server's status line nor its body (an
// internal server's answer), not the addresses dialled. The site
// cache's reason line is passed on.
func TestFetchErrorsInWords(t *testing.T) {
	const secret = "internal-answer-7f3a"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/internal":
			http.Error(w, secret, http.StatusTeapot)
		case "/error":
			http.Error(w, secret, http.StatusInternalServerError)
		case "/cache":
			http.Error(w, "site image cache: checksum mismatch for image http://images.example/u.raw: its sha256 is not the 00 given", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	// A port nothing listens on: one the test took and gave back.
	l := httptest.NewServer(http.NotFoundHandler())
	dead := l.URL
	l.Close()
	sum := strings.Repeat("a", 64)
	for _, c := range []struct {
		url, want string
		not       []string
	}{
		{srv.URL + "/internal", "the origin " + host + " of image " + srv.URL + "/internal did not answer with the image (not 200 OK: the request was refused); check instance_info image_source", []string{secret, "418", "teapot"}},
		{srv.URL + "/error", "did not answer with the image (not 200 OK: a server error)", []string{secret, "500", "Internal Server Error"}},
		{srv.URL + "/cache", "cannot download image " + srv.URL + "/cache: site image cache: checksum mismatch for image http://images.example/u.raw", []string{"502", "Bad Gateway"}},
		{dead + "/x", "cannot fetch image " + dead + "/x from its origin " + strings.TrimPrefix(dead, "http://") + ": the connection was refused", []string{"dial", "tcp"}},
	} {
		_, err := Write(t.Context(), Source{URL: c.url}, targetFile(t, 1<<20), Options{Checksum: sum})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want containing %q", c.url, err, c.want)
			continue
		}
		// What the error tells beside the addresses it names (a port
		// such as 35001 holds "500").
		told := strings.NewReplacer(host, "HOST", strings.TrimPrefix(dead, "http://"), "DEAD").Replace(err.Error())
		for _, n := range c.not {
			if strings.Contains(told, n) {
				t.Errorf("%s: err = %v tells %q", c.url, err, n)
			}
		}
	}
}

func TestWriteFromReader(t *testing.T) {
	img := testImage(1<<20 + 3)
	dev := targetFile(t, 2<<20)
	res, err := Write(t.Context(), Source{Reader: bytes.NewReader(zstded(img))}, dev, Options{InsecureSkipChecksum: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Compression != CompressionZstd || res.Written != uint64(len(img)) {
		t.Fatalf("result = %+v", res)
	}
	// A reader that fails midway is an error, never success.
	broken := io.MultiReader(bytes.NewReader(img[:1000]), iotestErrReader{io.ErrUnexpectedEOF})
	if _, err := Write(t.Context(), Source{Reader: broken}, dev, Options{InsecureSkipChecksum: true}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated reader: err = %v", err)
	}
	// Read-only, virtual media, removable and parameters medium targets are refused.
	for _, d := range []disk.Device{{Path: "/dev/sr0", VirtualMedia: true}, {Path: "/dev/sdx", ReadOnly: true},
		{Path: "/dev/sdy", Removable: true}, {Path: "/dev/sdz", ParamsMedium: true, VirtualMedia: true}} {
		if _, err := Write(t.Context(), Source{Reader: bytes.NewReader(img)}, d, Options{InsecureSkipChecksum: true}); err == nil {
			t.Errorf("Write to %+v succeeded", d)
		}
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

type brokenTarget struct {
	disk.Target
	short bool
}

func (b brokenTarget) WriteAt(p []byte, off int64) (int, error) {
	if b.short {
		n, err := b.Target.WriteAt(p[:len(p)/2], off)
		return n, err // short, without an error: a broken driver
	}
	return 0, syscall.EIO
}

func unopenable(path string, mode disk.OpenMode) (disk.Target, error) {
	return nil, syscall.EACCES
}

// TestWriteFailuresReportNothingDone: when the connection is cut or the
// device fails mid-stream, Write fails, and its result claims no checksum,
// no full write and no finished duration; the progress never reaches the
// image's end.
func TestWriteFailuresReportNothingDone(t *testing.T) {
	img := testImage(6 << 20)
	gz, zs := gzipped(img), zstded(img)
	srv := imageServer(t, map[string][]byte{"img.raw": img, "img.gz": gz, "img.zst": zs})
	cases := []struct {
		name, url, sum string
		open           disk.Opener
		want           string
	}{
		{"cut raw", srv.URL + "/cut/img.raw", sha256hex(img), nil, "unexpected EOF"},
		{"cut chunked raw", srv.URL + "/cutchunked/img.raw", sha256hex(img), nil, "unexpected EOF"},
		{"cut gzip", srv.URL + "/cut/img.gz", sha256hex(gz), nil, "unexpected EOF"},
		{"cut chunked zstd", srv.URL + "/cutchunked/img.zst", sha256hex(zs), nil, "unexpected EOF"},
		{"device fails after 1 MiB", srv.URL + "/ok/img.raw", sha256hex(img), failAfter(1 << 20), "input/output error"},
		{"device writes short after 1 MiB", srv.URL + "/ok/img.raw", sha256hex(img), shortAfter(1 << 20), "short write"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := targetFile(t, 8<<20)
			var last Progress
			res, err := Write(t.Context(), Source{URL: c.url}, dev, Options{Checksum: c.sum, Open: c.open, BufferBytes: 256 << 10,
				Progress: func(p Progress) { last = p }})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want containing %q", err, c.want)
			}
			if res.Checksum != "" || res.Duration != 0 || res.Written >= uint64(len(img)) || res.Downloaded != 0 {
				t.Errorf("result = %+v: a failed write reports checksum, duration, download or a full write", res)
			}
			if last.Written >= uint64(len(img)) {
				t.Errorf("progress reached %d of %d bytes written", last.Written, len(img))
			}
		})
	}
}

// TestWriteStopsDownloadOnDeviceError: a device error while the server
// is stalled must end Write at once (cancelling the download), not after
// the stall timeout.
func TestWriteStopsDownloadOnDeviceError(t *testing.T) {
	img := testImage(8 << 20)
	srv := imageServer(t, map[string][]byte{"img.raw": img})
	dev := targetFile(t, 8<<20)
	start := time.Now()
	_, err := Write(t.Context(), Source{URL: srv.URL + "/stall/img.raw"}, dev, Options{Checksum: sha256hex(img), Open: failAfter(1 << 20),
		BufferBytes: 256 << 10, StallTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("err = %v, want the device's input/output error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Write took %s to give up after the device error", d)
	}
}

// offsetFault fails (or shortens) writes at or after an offset.
type offsetFault struct {
	disk.Target
	at    int64
	short bool
}

func (o offsetFault) WriteAt(p []byte, off int64) (int, error) {
	if off < o.at {
		return o.Target.WriteAt(p, off)
	}
	if o.short {
		return o.Target.WriteAt(p[:len(p)/2], off)
	}
	return 0, syscall.EIO
}

func failAfter(at int64) disk.Opener {
	return func(path string, mode disk.OpenMode) (disk.Target, error) {
		t, err := disk.OpenFile(path, mode)
		return offsetFault{Target: t, at: at}, err
	}
}

func shortAfter(at int64) disk.Opener {
	return func(path string, mode disk.OpenMode) (disk.Target, error) {
		t, err := disk.OpenFile(path, mode)
		return offsetFault{Target: t, at: at, short: true}, err
	}
}

func shortWriter(path string, mode disk.OpenMode) (disk.Target, error) {
	t, err := disk.OpenFile(path, mode)
	return brokenTarget{Target: t, short: true}, err
}

func failingWriter(path string, mode disk.OpenMode) (disk.Target, error) {
	t, err := disk.OpenFile(path, mode)
	return brokenTarget{Target: t}, err
}

// BenchmarkWriteImage streams a 32 MiB image over loopback HTTP to a temp
// file: raw, and zstd-compressed, with sha256.
func BenchmarkWriteImage(b *testing.B) {
	img := testImage(32 << 20)
	zs := zstded(img)
	srv := imageServer(b, map[string][]byte{"img.raw": img, "img.zst": zs})
	for _, bc := range []struct{ name, file, sum string }{
		{"raw", "img.raw", sha256hex(img)},
		{"zstd", "img.zst", sha256hex(zs)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dev := targetFile(b, 33<<20)
			b.SetBytes(int64(len(img)))
			for b.Loop() {
				if _, err := Write(b.Context(), Source{URL: srv.URL + "/ok/" + bc.file}, dev, Options{Checksum: bc.sum}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The asynchronous hash sees exactly the bytes written, in order, for
// pieces smaller and larger than its buffers.
func TestAsyncHash(t *testing.T) {
	data := make([]byte, 3*asyncHashBuf+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	want := sha256.Sum256(data)
	h := sha256.New()
	a := newAsyncHash(h)
	for off, step := 0, 1; off < len(data); step = step*3 + 1 {
		end := min(off+step, len(data))
		if n, err := a.Write(data[off:end]); n != end-off || err != nil {
			t.Fatalf("Write = %d, %v; want %d", n, err, end-off)
		}
		off = end
	}
	a.Close()
	a.Close() // idempotent
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("digest %x, want %x", got, want)
	}
}
