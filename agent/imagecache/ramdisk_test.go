package imagecache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/ramdisk/disk"
	rimage "github.com/bmedge/bmedge/ramdisk/image"
)

// ramdiskTarget is a file standing for a node's disk.
func ramdiskTarget(t *testing.T, size int) disk.Device {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := disk.FromPath(p, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRamdiskThroughCache runs the real ramdisk's image writer against
// the cache: nodes that join a running download get the verified image;
// when the checksum fails at the edge, the ramdisk's transfer fails, it
// never takes the stream for a complete image.
func TestRamdiskThroughCache(t *testing.T) {
	const size = 6 << 20
	for _, wrong := range []bool{false, true} {
		name := "good"
		if wrong {
			name = "wrong checksum at the origin"
		}
		t.Run(name, func(t *testing.T) {
			o := newOrigin(t, size)
			o.gate = make(chan struct{})
			c := openCache(t, t.TempDir(), 1<<30)
			base := serveCache(t, c)
			sum := o.sum()
			if wrong {
				sum = badSum()
			}
			token, err := c.Register(o.url(), sum)
			if err != nil {
				t.Fatal(err)
			}
			const nodes = 3
			errs := make(chan error, nodes)
			devs := make([]disk.Device, nodes)
			for i := range nodes {
				devs[i] = ramdiskTarget(t, 8<<20)
				go func() {
					_, err := rimage.Write(t.Context(), rimage.Source{URL: base + PathPrefix + token}, devs[i], rimage.Options{Checksum: sum.String()})
					errs <- err
				}()
			}
			// The first node starts the download.
			if !waitfor.Until(30*time.Second, func() bool { return c.Stats().Downloading != 0 }) {
				t.Fatal("no node started the download")
			}
			close(o.gate)
			for range nodes {
				err := <-errs
				if wrong && err == nil {
					t.Error("a ramdisk wrote an image whose checksum failed at the edge, without an error")
				}
				// A node that joined the download sees its transfer cut;
				// one that asks after the check failed is told why, in the
				// cache's words.
				if wrong && err != nil && !strings.Contains(err.Error(), "unexpected EOF") &&
					!strings.Contains(err.Error(), "site image cache: checksum mismatch") {
					t.Errorf("ramdisk error %v; want the cut transfer or the cache's told checksum mismatch", err)
				}
				if !wrong && err != nil {
					t.Errorf("ramdisk through the cache: %v", err)
				}
			}
			if !wrong {
				for _, d := range devs {
					got, _ := os.ReadFile(d.Path)
					if !bytes.Equal(got[:size], o.data) {
						t.Error("a node's disk does not hold the image")
					}
				}
			}
			if n := o.requests.Load(); n != 1 {
				t.Errorf("origin asked %d times", n)
			}
		})
	}
}
