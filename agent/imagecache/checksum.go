package imagecache

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
)

// Checksum is the digest an image must have: Ironic's image_checksum
// ("HEX" or "ALGO:HEX") or its os_hash_algo / os_hash_value pair.
type Checksum struct {
	Algo string // md5, sha256 or sha512
	Hex  string // lower-case hex digest
}

// String is "ALGO:HEX".
func (c Checksum) String() string { return c.Algo + ":" + c.Hex }

func (c Checksum) hash() hash.Hash {
	switch c.Algo {
	case "md5":
		return md5.New()
	case "sha256":
		return sha256.New()
	default:
		return sha512.New()
	}
}

// ErrNoChecksum says that an image has no checksum: the cache keeps
// only images it can verify.
var ErrNoChecksum = errors.New("no image checksum: the site cache keeps only images it can verify (set instance_info image_checksum or image_os_hash_algo/image_os_hash_value)")

// ParseChecksum reads the checksum of an image as Ironic gives it; as the
// ramdisk does, os_hash_value (with os_hash_algo) wins over
// image_checksum.
func ParseChecksum(checksum, osHashAlgo, osHashValue string) (Checksum, error) {
	if v := strings.TrimSpace(osHashValue); v != "" {
		algo := strings.ToLower(strings.TrimSpace(osHashAlgo))
		if algo == "" {
			return parseSum(v)
		}
		return checkSum(algo, v)
	}
	return parseSum(checksum)
}

func parseSum(s string) (Checksum, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Checksum{}, ErrNoChecksum
	}
	if strings.Contains(s, "://") {
		return Checksum{}, fmt.Errorf("image checksum %q is a URL (a checksum file); the site cache needs the digest itself (ALGO:HEX)", s)
	}
	if algo, hexpart, ok := strings.Cut(s, ":"); ok {
		return checkSum(strings.ToLower(algo), hexpart)
	}
	switch len(s) {
	case 32:
		return checkSum("md5", s)
	case 64:
		return checkSum("sha256", s)
	case 128:
		return checkSum("sha512", s)
	}
	return Checksum{}, fmt.Errorf("image checksum %q has %d hex digits; want 32 (md5), 64 (sha256) or 128 (sha512), or ALGO:HEX", s, len(s))
}

func checkSum(algo, hexpart string) (Checksum, error) {
	hexpart = strings.ToLower(strings.TrimSpace(hexpart))
	want := map[string]int{"md5": 32, "sha256": 64, "sha512": 128}
	n, ok := want[algo]
	if !ok {
		return Checksum{}, fmt.Errorf("checksum algorithm %q is not supported; use sha256, sha512 or md5", algo)
	}
	if _, err := hex.DecodeString(hexpart); err != nil || len(hexpart) != n {
		return Checksum{}, fmt.Errorf("image checksum %q is not a %s digest (%d hex digits)", hexpart, algo, n)
	}
	return Checksum{Algo: algo, Hex: hexpart}, nil
}

// NewHash returns a fresh hash of c's algorithm.
func NewHash(c Checksum) hash.Hash { return c.hash() }
