package imagecache

import (
	"context"
	"testing"
)

// TestUnverifiedImage: an image fetched with no checksum (a ramdisk
// deploy's boot_iso) is downloaded once, kept and served whole; it is
// another image than the same URL with a checksum; and Unverified is
// the only algorithm-less checksum taken.
func TestUnverifiedImage(t *testing.T) {
	o := newOrigin(t, 3<<20)
	c := openCache(t, t.TempDir(), 1<<30)
	base := serveCache(t, c)
	r, err := c.Fetch(context.Background(), o.url(), Unverified)
	if err != nil || r.Size != int64(len(o.data)) {
		t.Fatalf("fetch: %+v, %v", r, err)
	}
	if r, err := c.Fetch(context.Background(), o.url(), Unverified); err != nil || !r.AlreadyCached {
		t.Fatalf("second fetch: %+v, %v; want already cached", r, err)
	}
	token, err := c.Register(o.url(), Unverified)
	if err != nil {
		t.Fatal(err)
	}
	g := get(base + PathPrefix + token)
	if want := o.sum(); g.err != nil || g.status != 200 || g.n != int64(len(o.data)) || g.sum != want.Hex {
		t.Fatalf("served %+v; want the image", g)
	}
	if n := o.requests.Load(); n != 1 {
		t.Fatalf("origin asked %d times; want once", n)
	}
	if vt, err := c.Register(o.url(), o.sum()); err != nil || vt == token {
		t.Fatalf("the checksummed image's token %q (%v) is the unverified one's", vt, err)
	}
	if _, err := c.Register(o.url(), Checksum{Algo: "none", Hex: "ab"}); err == nil {
		t.Fatal("algorithm none with a digest was taken")
	}
	if _, err := ParseChecksum("", "", ""); err != ErrNoChecksum {
		t.Fatalf("no checksum parsed as %v; the ramdisk's images still need one", err)
	}
}
