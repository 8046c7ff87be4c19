package imagechecksum

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary instance_info checksum fields to Parse and
// arbitrary checksum files to ParseFile. Neither may panic; what they
// accept must be well formed: a digest of a known algorithm, in lower-case
// hex of its length, that reads back the same from its String; or an
// http(s) URL, never both. Errors are bounded and keep a URL's password
// out.
func FuzzParse(f *testing.F) {
	h := strings.Repeat("ab", 32)
	for _, s := range [][4]string{
		{h, "", "", "x.raw"},
		{"SHA256:" + strings.ToUpper(h), "", "", ""},
		{strings.Repeat("c", 32), "sha512", strings.Repeat("d", 128), ""},
		{"", "sha256", "sha256:" + h, ""},
		{"https://u:pw@img/SHA256SUMS?s=1", "", "", h + "  x.raw\n"},
		{"http://img/SUMS", "", "", "SHA512 (x.raw) = " + strings.Repeat("e", 128)},
		{"crc:00", "", "", `\` + h + `  x\\.raw`},
		{"file:///x", "md5", "", "# c\n" + h + " *./x.raw\r\n"},
		{"", "", "", ""},
		// Found by the fuzzer: quoting a value that is not UTF-8 and
		// shorter than the quote's limit once cut past its end.
		{"0", "0", "\x9f\xeb\xf2\xbd\xde\xd00\xbc\xb9\xa5\xd7\xf1\x9b\xc4\xe5\xf1\xf6\xd50\x92\xda\xdd\xe9\xf5\xf8\x9b\xa3\xb0\xc4\xe9\xb8:", "0"},
		{"", "", strings.Repeat("\x10", 200) + "\xff:", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, checksum, algo, value, file string) {
		c, err := Parse(checksum, algo, value)
		check(t, c, err)
		if err != nil && isURL(strings.TrimSpace(checksum+value)) && strings.Contains(checksum+value, ":pw@") && strings.Contains(err.Error(), ":pw@") {
			t.Errorf("error shows a password: %v", err)
		}
		if c.IsURL() {
			name, nerr := FileName(checksum)
			if nerr == nil && name == "" {
				t.Error("FileName gave an empty name without an error")
			}
		}
		c, err = ParseFile(file, "x.raw")
		check(t, c, err)
		if err == nil && c.IsURL() {
			t.Errorf("ParseFile gave a URL: %+v", c)
		}
	})
}

func check(t *testing.T, c Checksum, err error) {
	t.Helper()
	if err != nil {
		if c != (Checksum{}) {
			t.Errorf("error %v with a checksum %+v", err, c)
		}
		if len(err.Error()) > 800 {
			t.Errorf("error of %d bytes", len(err.Error()))
		}
		return
	}
	if c.IsURL() {
		if c.Algo != "" || c.Hex != "" {
			t.Errorf("both a URL and a digest: %+v", c)
		}
		return
	}
	if HexLen(c.Algo) == 0 || len(c.Hex) != HexLen(c.Algo) || strings.ToLower(c.Hex) != c.Hex || notHex(c.Hex) != "" {
		t.Fatalf("malformed digest %+v", c)
	}
	again, err := ParseDigest(c.String(), "")
	if err != nil || again != c {
		t.Errorf("%s reads back as %+v, %v", c, again, err)
	}
}
