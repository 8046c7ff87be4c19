package imagechecksum

import (
	"errors"
	"strings"
	"testing"
)

var (
	md5Hex    = strings.Repeat("0a", 16)
	sha256Hex = strings.Repeat("1b", 32)
	sha384Hex = strings.Repeat("2c", 48)
	sha512Hex = strings.Repeat("3d", 64)
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		checksum, algo, value string
		want                  string // Checksum.String(), or the URL
		url                   bool
		errHas                []string // the error says what was wrong and what to do
		noSecret              string
	}{
		{name: "bare sha256", checksum: sha256Hex, want: "sha256:" + sha256Hex},
		{name: "bare sha512", checksum: sha512Hex, want: "sha512:" + sha512Hex},
		{name: "bare sha384", checksum: sha384Hex, want: "sha384:" + sha384Hex},
		{name: "bare md5 (legacy)", checksum: md5Hex, want: "md5:" + md5Hex},
		{name: "upper case, spaces", checksum: "  " + strings.ToUpper(sha256Hex) + "\n", want: "sha256:" + sha256Hex},
		{name: "ALGO:HEX", checksum: "SHA512:" + strings.ToUpper(sha512Hex), want: "sha512:" + sha512Hex},
		{name: "md5:HEX", checksum: "md5:" + md5Hex, want: "md5:" + md5Hex},
		{name: "sha1:HEX", checksum: "sha1:" + strings.Repeat("4e", 20), want: "sha1:" + strings.Repeat("4e", 20)},
		{name: "Glance's os_hash sha1", algo: "sha1", value: strings.Repeat("4e", 20), want: "sha1:" + strings.Repeat("4e", 20)},
		{name: "os_hash wins", checksum: md5Hex, algo: "sha256", value: sha256Hex, want: "sha256:" + sha256Hex},
		{name: "os_hash wins over a URL", checksum: "http://x/SUMS", algo: "sha512", value: sha512Hex, want: "sha512:" + sha512Hex},
		{name: "os_hash_algo in capitals", algo: " SHA256 ", value: sha256Hex, want: "sha256:" + sha256Hex},
		{name: "os_hash_value without algo: by length", value: sha512Hex, want: "sha512:" + sha512Hex},
		{name: "os_hash_value with an agreeing prefix", algo: "sha256", value: "sha256:" + sha256Hex, want: "sha256:" + sha256Hex},
		{name: "os_hash_algo alone is ignored", checksum: sha256Hex, algo: "sha512", want: "sha256:" + sha256Hex},
		{name: "checksum file URL", checksum: "https://images.example/ubuntu/SHA256SUMS", want: "https://images.example/ubuntu/SHA256SUMS", url: true},
		{name: "checksum file URL, http, capital scheme", checksum: "HTTP://images.example/SUMS", want: "HTTP://images.example/SUMS", url: true},

		{name: "nothing", errHas: []string{"no image checksum", "image_checksum"}},
		{name: "only spaces", checksum: " \t", value: " ", errHas: []string{"no image checksum"}},
		{name: "short digest", checksum: "sha256:00", errHas: []string{"sha256", "64 hex digits", "give"}},
		{name: "unknown algorithm", checksum: "crc32:00", errHas: []string{"crc32", "not known", "sha256"}},
		{name: "bare digest of odd length", checksum: strings.Repeat("a", 40), errHas: []string{"40 characters", "64 hex digits", "sha1:HEX"}},
		{name: "not hex", checksum: strings.Repeat("g", 64), errHas: []string{"not all hex", "image_checksum"}},
		{name: "prefix disagrees with os_hash_algo", algo: "sha512", value: "sha256:" + sha256Hex, errHas: []string{"make them agree"}},
		{name: "os_hash_value not hex", algo: "sha256", value: "zz", errHas: []string{"image_os_hash_value", "sha256"}},
		{name: "os_hash_value of the wrong length for its algo", algo: "sha512", value: sha256Hex, errHas: []string{"sha512", "128 hex digits"}},
		{name: "os_hash_value is a URL", value: "https://u:secret@x/SUMS", errHas: []string{"image_os_hash_value", "image_checksum"}, noSecret: "secret"},
		{name: "file URL", checksum: "file:///srv/SHA256SUMS", errHas: []string{"\"file\" URL", "http"}},
		{name: "URL without host", checksum: "http:///SUMS", errHas: []string{"no host"}},
		{name: "bad URL keeps its password out", checksum: "http://u:secret@x/%zz", errHas: []string{"not a valid URL"}, noSecret: "secret"},
		{name: "long garbage is cut in the message", checksum: "sha256:" + strings.Repeat("x", 5000), errHas: []string{"…"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.checksum, tc.algo, tc.value)
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("Parse = %+v, want an error", c)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				if tc.noSecret != "" && strings.Contains(err.Error(), tc.noSecret) {
					t.Errorf("error %q shows %q", err, tc.noSecret)
				}
				if len(err.Error()) > 600 {
					t.Errorf("error of %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.IsURL() != tc.url {
				t.Errorf("IsURL = %v", c.IsURL())
			}
			got := c.String()
			if tc.url {
				got = c.URL
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := Parse("", "", ""); !errors.Is(err, ErrNoChecksum) {
		t.Errorf("no checksum: %v, want ErrNoChecksum", err)
	}
}

func TestParseDigestAlgorithms(t *testing.T) {
	for algo, n := range map[string]int{MD5: 32, SHA256: 64, SHA384: 96, SHA512: 128} {
		if HexLen(algo) != n {
			t.Errorf("HexLen(%s) = %d", algo, HexLen(algo))
		}
		c, err := ParseDigest(strings.Repeat("e", n), algo)
		if err != nil || c.Algo != algo {
			t.Errorf("ParseDigest of a %s digest: %+v %v", algo, c, err)
		}
	}
	if HexLen("crc32") != 0 {
		t.Error("HexLen of an unknown algorithm")
	}
}

func TestFileName(t *testing.T) {
	for in, want := range map[string]string{
		"http://img.example/ubuntu/noble.raw":        "noble.raw",
		"https://img.example/a/b/c.qcow2?sig=x#frag": "c.qcow2",
		"http://img.example/dir/my%20image.img":      "my image.img",
		"http://img.example/dir/":                    "dir",
		"http://img.example":                         "",
		"http://u:secret@img.example/%zz":            "",
	} {
		got, err := FileName(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("FileName(%q) = %q, %v; want %q", in, got, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("FileName error shows a password: %v", err)
		}
	}
}

func TestParseFile(t *testing.T) {
	const name = "noble.raw"
	for _, tc := range []struct {
		name   string
		text   string
		want   string
		errHas []string
	}{
		{name: "sha256sum output", text: sha256Hex + "  other.raw\n" + strings.Repeat("ff", 32) + "  " + name + "\n", want: "sha256:" + strings.Repeat("ff", 32)},
		{name: "binary mode star", text: sha512Hex + " *" + name + "\n", want: "sha512:" + sha512Hex},
		{name: "CRLF and comments", text: "# made by hand\r\n\r\n" + sha256Hex + "  " + name + "\r\n", want: "sha256:" + sha256Hex},
		{name: "one bare digest", text: "\n" + strings.ToUpper(sha256Hex) + "\n\n", want: "sha256:" + sha256Hex},
		{name: "one ALGO:HEX", text: "sha512:" + sha512Hex, want: "sha512:" + sha512Hex},
		{name: "dot slash", text: md5Hex + "  ./" + name, want: "md5:" + md5Hex},
		{name: "tab separated", text: sha256Hex + "\t" + name, want: "sha256:" + sha256Hex},
		{name: "BSD tag (Fedora CHECKSUM)", text: "# " + name + ": 1234 bytes\nSHA256 (" + name + ") = " + sha256Hex + "\n", want: "sha256:" + sha256Hex},
		{name: "strongest algorithm wins", text: "MD5 (" + name + ") = " + md5Hex + "\nSHA512 (" + name + ") = " + sha512Hex + "\nSHA256 (" + name + ") = " + sha256Hex, want: "sha512:" + sha512Hex},
		{name: "same digest twice", text: sha256Hex + "  " + name + "\n" + sha256Hex + " *" + name, want: "sha256:" + sha256Hex},
		{name: "escaped name", text: `\` + sha256Hex + `  a\\b` + "\n" + sha512Hex + "  " + name, want: "sha512:" + sha512Hex},
		{name: "a longer name is another file", text: sha256Hex + "  " + name + ".sig\n" + sha512Hex + "  " + name, want: "sha512:" + sha512Hex},
		{name: "lines of other files are not checked", text: "garbage\n" + sha256Hex + "  " + name, want: "sha256:" + sha256Hex},

		{name: "empty", text: " \n\r\n", errHas: []string{"empty"}},
		{name: "only a comment", text: "# nothing", errHas: []string{"no line for \"noble.raw\""}},
		{name: "other files only", text: sha256Hex + "  a.raw\n" + sha256Hex + "  b.raw", errHas: []string{"no line for \"noble.raw\"", "image_source"}},
		{name: "one word, not a digest", text: "hello", errHas: []string{"one word", "digest"}},
		{name: "malformed line for the image", text: "zz  " + name + "\nx y", errHas: []string{"line for \"noble.raw\"", "line 1"}},
		{name: "two digests of one algorithm", text: sha256Hex + "  " + name + "\n" + strings.Repeat("ff", 32) + "  " + name, errHas: []string{"two different sha256 digests", "fix the file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseFile(tc.text, name)
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("ParseFile = %+v, want an error", c)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.String() != tc.want {
				t.Errorf("got %s, want %s", c, tc.want)
			}
		})
	}
	if _, err := ParseFile(sha256Hex+"  x", ""); err == nil {
		t.Error("ParseFile with no name")
	}
	// The escaped name itself is found.
	if c, err := ParseFile(`\`+sha256Hex+`  a\\b`+"\n"+sha512Hex+"  c", `a\b`); err != nil || c.Algo != SHA256 {
		t.Errorf("escaped name: %+v %v", c, err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://img.example/SUMS":              "https://img.example/SUMS",
		"https://u:pw@img.example/SUMS?sig=s#f": "https://…@img.example/SUMS?…",
		"http://u:pw@img.example/%zz":           "http://…",
		"::":                                    "…",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	c := Checksum{URL: "https://u:pw@img.example/SUMS?sig=s"}
	if s := c.String(); strings.Contains(s, "pw") || strings.Contains(s, "sig") {
		t.Errorf("Checksum.String shows a secret: %s", s)
	}
}

// TestLegacyAndNewHash: md5 and sha1 are the legacy algorithms; NewHash
// gives each known algorithm's hash, of its digest length.
func TestLegacyAndNewHash(t *testing.T) {
	for _, a := range []string{MD5, SHA1, SHA256, SHA384, SHA512} {
		if Legacy(a) != (a == MD5 || a == SHA1) {
			t.Errorf("Legacy(%s) = %v", a, Legacy(a))
		}
		h := NewHash(a)
		if h == nil || 2*h.Size() != HexLen(a) {
			t.Errorf("NewHash(%s) = %v; want a hash of %d hex digits", a, h, HexLen(a))
		}
	}
	if NewHash("crc32") != nil {
		t.Error("NewHash of an unknown algorithm is not nil")
	}
}
