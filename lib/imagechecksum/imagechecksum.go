// Package imagechecksum reads an image checksum as Ironic gives it in a
// node's instance_info: image_os_hash_algo + image_os_hash_value, or
// image_checksum, which is a bare hex digest (its length says the
// algorithm), "ALGO:HEX", or the http(s) URL of a checksum file such as
// SHA256SUMS.
//
// It only parses: it never fetches a checksum file (Parse says "this is a
// URL, fetch it"; ParseFile reads the text once the caller fetched it),
// and it never decides whether an algorithm is good enough. Each program
// keeps its own policy: sha256 and sha512 always; md5 and sha1 only
// where the operator allows them (the coordinator's
// --allow-md5-checksum, Ironic's [agent]allow_md5_checksum, which the
// coordinator passes to the ramdisk with the image; the site cache,
// whose check only keeps a corrupt download from being served, takes
// them always). It must stay free of I/O and of any program's packages.
package imagechecksum

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The algorithms the parser knows, by their hashlib names (the names
// Glance and Ironic use in os_hash_algo).
const (
	MD5    = "md5"
	SHA1   = "sha1"
	SHA256 = "sha256"
	SHA384 = "sha384"
	SHA512 = "sha512"
)

// MaxURLBytes bounds a checksum file URL.
const MaxURLBytes = 8192

// hexLen is the digest length in hex digits of each known algorithm.
var hexLen = map[string]int{MD5: 32, SHA1: 40, SHA256: 64, SHA384: 96, SHA512: 128}

// byLen infers the algorithm of a bare digest from its length, as
// ironic-python-agent does for SHA-2, and as Ironic does for the legacy
// md5 image_checksum. sha1 is read only when named (sha1:HEX, or
// image_os_hash_algo sha1), as neither infers it.
var byLen = map[int]string{32: MD5, 64: SHA256, 96: SHA384, 128: SHA512}

// strength orders the algorithms, for a checksum file that lists one
// image under several.
var strength = map[string]int{MD5: 1, SHA1: 2, SHA256: 3, SHA384: 4, SHA512: 5}

// Legacy tells whether algo is one of the broken hashes (md5, sha1) that
// Ironic takes only when the operator allows them
// ([agent]allow_md5_checksum).
func Legacy(algo string) bool { return algo == MD5 || algo == SHA1 }

// NewHash returns a fresh hash of algo, nil for an algorithm the parser
// does not know.
func NewHash(algo string) hash.Hash {
	switch algo {
	case MD5:
		return md5.New()
	case SHA1:
		return sha1.New()
	case SHA256:
		return sha256.New()
	case SHA384:
		return sha512.New384()
	case SHA512:
		return sha512.New()
	}
	return nil
}

// HexLen is the length in hex digits of a digest of algo, 0 for an
// algorithm the parser does not know.
func HexLen(algo string) int { return hexLen[algo] }

// ErrNoChecksum says that none of the checksum fields is set.
var ErrNoChecksum = errors.New("no image checksum: set instance_info image_checksum (HEX, ALGO:HEX or the URL of a checksum file) or image_os_hash_algo and image_os_hash_value")

// Checksum is a parsed image checksum: either a digest (Algo and Hex) or
// the URL of a checksum file to fetch and read with ParseFile (URL).
type Checksum struct {
	Algo string // md5, sha1, sha256, sha384 or sha512; empty when URL is set
	Hex  string // the lower-case hex digest; empty when URL is set
	URL  string // the checksum file's http(s) URL; empty for a digest
}

// IsURL tells whether c is a checksum file still to fetch.
func (c Checksum) IsURL() bool { return c.URL != "" }

// String is "ALGO:HEX", or for a checksum file its URL without
// credentials or query string (safe for logs and messages).
func (c Checksum) String() string {
	if c.URL != "" {
		return RedactURL(c.URL)
	}
	return c.Algo + ":" + c.Hex
}

// Parse reads the checksum fields of instance_info. As in Ironic,
// image_os_hash_value (with image_os_hash_algo) wins over image_checksum
// when it is set; without image_os_hash_algo its algorithm comes from its
// length. Only image_checksum may be a checksum file URL.
func Parse(imageChecksum, osHashAlgo, osHashValue string) (Checksum, error) {
	if v := strings.TrimSpace(osHashValue); v != "" {
		algo := strings.ToLower(strings.TrimSpace(osHashAlgo))
		if isURL(v) {
			return Checksum{}, fmt.Errorf("image_os_hash_value %s is a URL; a checksum file URL goes in image_checksum, image_os_hash_value must be the digest itself", quote(RedactURL(v)))
		}
		c, err := ParseDigest(v, algo)
		if err != nil {
			return Checksum{}, fmt.Errorf("image_os_hash_value: %w", err)
		}
		return c, nil
	}
	s := strings.TrimSpace(imageChecksum)
	if s == "" {
		return Checksum{}, ErrNoChecksum
	}
	if isURL(s) {
		return parseURL(s)
	}
	c, err := ParseDigest(s, "")
	if err != nil {
		return Checksum{}, fmt.Errorf("image_checksum: %w", err)
	}
	return c, nil
}

// isURL tells whether s is meant as a URL (a scheme and "://"), rather
// than ALGO:HEX.
func isURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	return ok && validScheme(scheme)
}

// validScheme tells whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, "+", "-" or ".").
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		letter := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
		if !letter && (i == 0 || !('0' <= b && b <= '9' || b == '+' || b == '-' || b == '.')) {
			return false
		}
	}
	return true
}

func parseURL(s string) (Checksum, error) {
	if len(s) > MaxURLBytes {
		return Checksum{}, fmt.Errorf("image_checksum is a URL of %d bytes; the limit is %d: give a shorter checksum file URL or the digest itself", len(s), MaxURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Checksum{}, fmt.Errorf("image_checksum %s is not a valid URL; give the http(s) URL of a checksum file, or the digest itself (ALGO:HEX)", quote(RedactURL(s)))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		// Only the scheme: the rest of a URL of another kind is not
		// parsed as host and userinfo, and may hold a password all the
		// same (found by FuzzParse: "a:///:pw@").
		return Checksum{}, fmt.Errorf("image_checksum is a %s URL; a checksum file must be fetched over http:// or https://, or give the digest itself (ALGO:HEX)", quote(u.Scheme))
	}
	if u.Host == "" {
		// Not quoted: without a host, what would be user:password@host
		// is in the path (http:///user:pw@host).
		return Checksum{}, fmt.Errorf("image_checksum, a %s URL, names no host; give the full http(s) URL of the checksum file", scheme)
	}
	return Checksum{URL: s}, nil
}

// ParseDigest reads one digest, "HEX" or "ALGO:HEX" (any case, spaces
// around it ignored). algo, when not empty, is the algorithm the digest
// is of (image_os_hash_algo): a prefix must agree with it. Without either,
// the algorithm comes from the digest's length: 32 hex digits md5, 64
// sha256, 96 sha384, 128 sha512 (sha1's 40 only when named).
func ParseDigest(s, algo string) (Checksum, error) {
	s = strings.TrimSpace(s)
	algo = strings.ToLower(strings.TrimSpace(algo))
	digest := s
	if a, h, ok := strings.Cut(s, ":"); ok {
		a = strings.ToLower(strings.TrimSpace(a))
		if algo != "" && a != algo {
			return Checksum{}, fmt.Errorf("checksum %s says %s but its algorithm is given as %s; make them agree", quote(s), quote(a), quote(algo))
		}
		algo, digest = a, strings.TrimSpace(h)
	}
	if digest == "" {
		return Checksum{}, errors.New("the checksum is empty; give the image's hex digest (sha256 or sha512)")
	}
	if algo == "" {
		algo = byLen[len(digest)]
		if algo == "" {
			return Checksum{}, fmt.Errorf("checksum %s has %d characters; a bare digest must have 64 hex digits (sha256), 128 (sha512), 96 (sha384) or 32 (md5), a sha1 one its prefix (sha1:HEX): give ALGO:HEX or the image's full digest",
				quote(s), len(digest))
		}
	}
	n, ok := hexLen[algo]
	if !ok {
		return Checksum{}, fmt.Errorf("checksum algorithm %s is not known; use sha256 or sha512 (also read: sha384, md5, sha1)", quote(algo))
	}
	if _, err := hex.DecodeString(digest); err != nil || len(digest) != n {
		return Checksum{}, fmt.Errorf("checksum %s is not a %s digest: want %d hex digits, got %d characters%s; give the image's full %s hex digest",
			quote(s), algo, n, len(digest), notHex(digest), algo)
	}
	return Checksum{Algo: algo, Hex: strings.ToLower(digest)}, nil
}

// notHex says ", not all hex" when s has a character that is not a hex digit.
func notHex(s string) string {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return ", not all hex"
		}
	}
	return ""
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// FileName is the name an image has in a checksum file: the last element
// of its URL's path (as Ironic and ironic-python-agent match it).
func FileName(imageURL string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(imageURL))
	if err != nil {
		return "", fmt.Errorf("image URL %s is not valid, so its name in the checksum file is not known; fix image_source", quote(RedactURL(imageURL)))
	}
	name := path.Base(u.Path)
	if name == "." || name == "/" || name == "" {
		return "", fmt.Errorf("image URL %s has no file name to look up in the checksum file; give a URL that ends with the image's file name, or the digest itself in image_checksum", quote(RedactURL(imageURL)))
	}
	return name, nil
}

// ParseFile finds the digest of the image file name in the text of a
// checksum file (fetched from the URL Parse returned). It reads, as
// Ironic does: a file of one line holding only a digest (the image's);
// GNU coreutils lines "HEX  NAME" and "HEX *NAME" (sha256sum and
// friends); and, beyond Ironic, BSD tag lines "SHA256 (NAME) = HEX"
// (sha256sum --tag, Fedora's CHECKSUM files). Lines starting with "#"
// and lines of other files are skipped. When the file lists the image
// under several algorithms the strongest wins; two different digests of
// one algorithm are an error.
func ParseFile(text, name string) (Checksum, error) {
	if name == "" {
		return Checksum{}, errors.New("no image file name to look up in the checksum file; give the image's URL")
	}
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return Checksum{}, errors.New("the checksum file is empty; fix the file image_checksum names, or give the digest itself")
	}
	if len(lines) == 1 && !strings.ContainsAny(lines[0], " \t") && !strings.HasPrefix(lines[0], "#") {
		c, err := ParseDigest(lines[0], "")
		if err != nil {
			return Checksum{}, fmt.Errorf("the checksum file holds one word, which is not a digest: %w", err)
		}
		return c, nil
	}
	var found Checksum
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			continue
		}
		algo, digest, entry, ok := splitLine(l)
		if !ok || (entry != name && entry != "./"+name) {
			continue
		}
		c, err := ParseDigest(digest, algo)
		if err != nil {
			return Checksum{}, fmt.Errorf("the checksum file's line for %s (non-empty line %d) is malformed: %w", quote(name), i+1, err)
		}
		switch {
		case found.Algo == "" || strength[c.Algo] > strength[found.Algo]:
			found = c
		case c.Algo == found.Algo && c.Hex != found.Hex:
			return Checksum{}, fmt.Errorf("the checksum file gives %s two different %s digests (%s and %s); fix the file", quote(name), c.Algo, found.Hex, c.Hex)
		}
	}
	if found.Algo == "" {
		return Checksum{}, fmt.Errorf("the checksum file has no line for %s (the last part of image_source); check that it lists the image, or give the digest itself", quote(name))
	}
	return found, nil
}

// splitLine reads one line of a checksum file: its algorithm (from a BSD
// tag, else ""), its digest and the file it names.
func splitLine(l string) (algo, digest, entry string, ok bool) {
	// BSD: "ALGO (NAME) = HEX".
	if i := strings.Index(l, " ("); i > 0 && !strings.ContainsAny(l[:i], " \t") {
		if j := strings.LastIndex(l, ") = "); j > i {
			return l[:i], l[j+4:], l[i+2 : j], true
		}
	}
	// GNU: "HEX  NAME" or "HEX *NAME"; a leading backslash means the
	// name is escaped (\\ and \n).
	escaped := strings.HasPrefix(l, `\`)
	if escaped {
		l = l[1:]
	}
	i := strings.IndexAny(l, " \t")
	if i <= 0 {
		return "", "", "", false
	}
	digest = l[:i]
	entry = strings.TrimLeft(strings.TrimSpace(l[i:]), "*")
	if escaped {
		entry = unescape(entry)
	}
	return "", digest, entry, entry != ""
}

// unescape undoes coreutils' escaping of a file name.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RedactURL names a URL for messages: its user information (credentials)
// and query string (often a signature) are left out, and an unparsable URL
// is cut before anything that could hold them.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Keep the scheme and no more: the rest could hold user:password@.
		if scheme, _, ok := strings.Cut(s, "://"); ok && validScheme(scheme) {
			return scheme + "://…"
		}
		return "…"
	}
	user := u.User != nil
	q := u.RawQuery != "" || u.ForceQuery
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	out := u.String()
	if user {
		if scheme, rest, ok := strings.Cut(out, "://"); ok {
			out = scheme + "://…@" + rest
		}
	}
	if q {
		out += "?…"
	}
	return out
}

// quote quotes s for a message, cut so that the quoted text stays short:
// the values quoted come from instance_info, which anyone with the API
// may set, and go into last_error and logs.
func quote(s string) string {
	const limit = 120 // bytes of the quoted text
	if q := strconv.Quote(s); len(q) <= limit {
		return q
	}
	cut := min(len(s), limit)
	for cut > 0 {
		for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if q := strconv.Quote(s[:cut] + "…"); len(q) <= limit {
			return q
		}
		cut--
	}
	return `"…"`
}
