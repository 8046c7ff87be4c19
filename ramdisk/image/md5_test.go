package image

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestWriteMD5Checksum: an md5 or sha1 checksum is refused naming the
// coordinator's option unless AllowMD5Checksum (the coordinator's
// --allow-md5-checksum, Ironic's [agent]allow_md5_checksum) says to take
// it; with it, the image is verified against it: the right digest writes
// the image, a wrong one fails with both digests.
func TestWriteMD5Checksum(t *testing.T) {
	img := testImage(1<<20 + 5)
	srv := imageServer(t, map[string][]byte{"img.raw": img})
	m, s1 := md5.Sum(img), sha1.Sum(img)
	md5hex, sha1hex := hex.EncodeToString(m[:]), hex.EncodeToString(s1[:])
	url := srv.URL + "/ok/img.raw"
	for _, c := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"md5 without the option", Options{Checksum: md5hex}, "--allow-md5-checksum"},
		{"sha1 without the option", Options{Checksum: sha1hex, ChecksumAlgo: "sha1"}, "--allow-md5-checksum"},
		{"md5 allowed", Options{Checksum: md5hex, AllowMD5Checksum: true}, ""},
		{"sha1 allowed", Options{Checksum: "sha1:" + sha1hex, AllowMD5Checksum: true}, ""},
		{"wrong md5 allowed", Options{Checksum: "md5:" + strings.Repeat("0", 32), AllowMD5Checksum: true}, "its md5 is not the " + strings.Repeat("0", 32) + " given"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := targetFile(t, 2<<20)
			res, err := Write(t.Context(), Source{URL: url}, dev, c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, c.wantErr)
				}
				// The digest of what came back is never told (issue 30's
				// hash oracle): only the checksum the operator gave.
				if given := c.opts.Checksum; !strings.Contains(given, md5hex) && !strings.Contains(given, sha1hex) &&
					(strings.Contains(err.Error(), md5hex) || strings.Contains(err.Error(), sha1hex)) {
					t.Fatalf("err = %v names the digest of the image received", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(dev.Path)
			if !bytes.Equal(got[:len(img)], img) || res.ChecksumAlgo == "" {
				t.Fatalf("image not written as verified: %+v", res)
			}
		})
	}
}
