package shacrypt

import (
	"strings"
	"testing"
)

// Vectors made by glibc's crypt(3) (Python's crypt module on Debian 12).
var glibc = []struct{ pw, hash string }{
	{"s3cret", "$6$saltstring$xwVXmdoFwkuFfkvrCnFqepsb1G.0z7.VoLCq69.god.O.zXvYSQsLM/oDMuI05ufmibO/tzUYEh4IPt9kZAc0."},
	{"s3cret", "$5$saltstring$9QqUIsp6bPD8uX5rHa8zB21q7JTr9i41vD3jA8fwv68"},
	{"s3cret", "$6$rounds=1200$saltstring$OEdKeWjJ6LZPHVnDlm4046Dj8/DyygJ0m3K0zSTLUX4LsFrXPOHqOG9JQda5bzc6CG1xfgGSTfeWAErp0XLkD0"},
	{"", "$6$x$QSmr1Bx2g4O6BzKvdkgOcyU6H91X6I/XBv5pSalMhSPkwdH6Beo3F455xZJg0v//bxVK5F4OE5k1.0xuR26MK0"},
	{"", "$5$x$yHbtfs4Y8t6X1xcJemNX.4JQRfUTafA2qQenWGLBee2"},
	{strings.Repeat("a", 100), "$6$abcdefghijklmnop$ZW3yixa3ExXjp32Kntt.IV2krvDXw.nWdGkqpCo65dluAx.25kaQM.iYywVP3SFVNEaptdOkL99N6Nf98Bmnr/"},
	{strings.Repeat("a", 100), "$5$abcdefghijklmnop$GVfEH2jFx161VOuIgXFXekil7sVwefZTVjH7P3KiDE6"},
	// From the specification's own test vectors.
	{"Hello world!", "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"},
	{"Hello world!", "$5$rounds=10000$saltstringsaltst$3xv.VbSHBb41AL9AvLeujZkZRBAwqFMz2.opqey6IcA"},
}

// TestGlibcVectors: the hashes glibc makes verify, and a wrong password
// does not.
func TestGlibcVectors(t *testing.T) {
	for _, v := range glibc {
		if err := Verify(v.hash, v.pw); err != nil {
			t.Errorf("Verify(%s, %q): %v", v.hash, v.pw, err)
		}
		if err := Verify(v.hash, v.pw+"x"); err != ErrMismatch {
			t.Errorf("Verify(%s) of a wrong password: %v, want ErrMismatch", v.hash, err)
		}
	}
}

func TestHashRoundTrip(t *testing.T) {
	h, err := Hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$6$") || len(h) != 3+16+1+86 || strings.Contains(h, "correct") {
		t.Fatalf("Hash: %q", h)
	}
	h2, _ := Hash("correct horse")
	if h == h2 {
		t.Fatal("two hashes of one password share a salt")
	}
	if err := Verify(h, "correct horse"); err != nil {
		t.Fatal(err)
	}
	if err := Verify(h, "correct horsf"); err != ErrMismatch {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestRefused(t *testing.T) {
	for _, h := range []string{"", "secret", "$1$abc$def", "$6$salt", "$6$salt$short",
		"$6$rounds=99999999$salt$" + strings.Repeat("a", 86), "$6$rounds=x$salt$" + strings.Repeat("a", 86),
		"$6$salt$" + strings.Repeat("!", 86)} {
		if err := Check(h); err == nil {
			t.Errorf("Check(%q) accepted", h)
		}
		if err := Verify(h, "x"); err == nil {
			t.Errorf("Verify(%q) accepted", h)
		}
	}
	if _, err := Hash(strings.Repeat("a", MaxPasswordLen+1)); err == nil {
		t.Error("Hash of an over-long password accepted")
	}
}
