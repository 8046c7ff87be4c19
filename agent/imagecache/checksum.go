package imagecache

import (
	"errors"
	"fmt"
	"hash"

	"github.com/bmedge/bmedge/lib/imagechecksum"
)

// Checksum is the digest an image must have. It is read by
// lib/imagechecksum; which algorithms the cache takes is decided
// here (see acceptAlgo).
type Checksum struct {
	Algo string // md5, sha1, sha256, sha384 or sha512
	Hex  string // lower-case hex digest
}

// Unverified is the checksum of an image the operator gave none for and
// that the cache keeps all the same: a ramdisk deploy's boot ISO
// (instance_info boot_iso, which Ironic takes without a checksum). It is
// fetched under the fetch rule like any image, and its bytes are
// checked against nothing; the same URL with a checksum is another
// image.
var Unverified = Checksum{Algo: "none"}

// String is "ALGO:HEX".
func (c Checksum) String() string { return c.Algo + ":" + c.Hex }

func (c Checksum) hash() hash.Hash {
	if h := imagechecksum.NewHash(c.Algo); h != nil {
		return h
	}
	return imagechecksum.NewHash(imagechecksum.SHA512)
}

// ErrNoChecksum says that an image has no checksum: the cache keeps
// only images it can verify.
var ErrNoChecksum = errors.New("no image checksum: the site cache keeps only images it can verify (set instance_info image_checksum or image_os_hash_algo/image_os_hash_value)")

// ParseChecksum reads the checksum of an image as Ironic gives it; as the
// ramdisk does, os_hash_value (with os_hash_algo) wins over
// image_checksum. The cache takes a digest of md5, sha1, sha256, sha384
// or sha512. md5 and sha1 are taken whatever the coordinator's
// --allow-md5-checksum: the cache's check only keeps a corrupt download
// from being served, the node verifies the image again under the
// coordinator's rule (a deploy the coordinator refuses never comes). A checksum file URL is
// refused: the cache does not fetch checksum files, so such an image is
// left to the ramdisk.
func ParseChecksum(checksum, osHashAlgo, osHashValue string) (Checksum, error) {
	c, err := imagechecksum.Parse(checksum, osHashAlgo, osHashValue)
	if errors.Is(err, imagechecksum.ErrNoChecksum) {
		return Checksum{}, ErrNoChecksum
	}
	if err != nil {
		return Checksum{}, err
	}
	if c.IsURL() {
		return Checksum{}, fmt.Errorf("image checksum %s is a URL of a checksum file; the site cache does not fetch checksum files and needs the digest itself: give image_checksum as ALGO:HEX (or image_os_hash_algo and image_os_hash_value) to have the image cached", c)
	}
	return acceptAlgo(c)
}

// acceptAlgo is the cache's rule on algorithms.
func acceptAlgo(c imagechecksum.Checksum) (Checksum, error) {
	switch c.Algo {
	case imagechecksum.MD5, imagechecksum.SHA1, imagechecksum.SHA256, imagechecksum.SHA384, imagechecksum.SHA512:
		return Checksum{Algo: c.Algo, Hex: c.Hex}, nil
	}
	return Checksum{}, fmt.Errorf("the site cache does not verify %s checksums; give the image's sha256, sha384 or sha512 digest (md5 and sha1 are also taken)", c.Algo)
}

// checkSum validates a Checksum given as a value (Register, Fetch).
func checkSum(algo, hexpart string) (Checksum, error) {
	if algo == "" {
		return Checksum{}, errors.New("the checksum has no algorithm; give ALGO:HEX with sha256, sha384, sha512, md5 or sha1")
	}
	if algo == Unverified.Algo && hexpart == "" {
		return Unverified, nil
	}
	c, err := imagechecksum.ParseDigest(hexpart, algo)
	if err != nil {
		return Checksum{}, err
	}
	return acceptAlgo(c)
}

// NewHash returns a fresh hash of c's algorithm.
func NewHash(c Checksum) hash.Hash { return c.hash() }
