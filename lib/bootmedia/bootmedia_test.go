package bootmedia

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const sample = `bm.node=6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f bm.site=lab bm.broker=mqtts://10.0.0.1:8883 bm.user=node:6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f bm.password=s3cr3t bm.ip=10.0.2.15/24 bm.gw=10.0.2.2 bm.x="quoted value"`

func mustImage(t testing.TB, params string) []byte {
	t.Helper()
	img, err := ParamsImage(params)
	if err != nil {
		t.Fatalf("ParamsImage(%d bytes): %v", len(params), err)
	}
	return img
}

func TestRoundTrip(t *testing.T) {
	for _, params := range []string{
		sample,
		"",
		"bm.node=n1",
		strings.Repeat("a", SectorSize),   // exactly one sector
		strings.Repeat("b", SectorSize+1), // spills into a second
		"bm.node=n " + strings.Repeat("x", MaxParams-10), // the largest
		"bm.note=ünïcødé\tbm.node=n",
	} {
		img := mustImage(t, params)
		if len(img)%SectorSize != 0 {
			t.Fatalf("image of %d bytes is not whole sectors", len(img))
		}
		if want := (fileSector + max(1, (len(params)+SectorSize-1)/SectorSize)) * SectorSize; len(img) != want {
			t.Fatalf("image of %d bytes, want %d", len(img), want)
		}
		got, err := ReadParams(bytes.NewReader(img), int64(len(img)))
		if err != nil {
			t.Fatalf("ReadParams: %v", err)
		}
		if got != strings.TrimSpace(params) {
			t.Fatalf("round trip of %d bytes gave %d bytes: %.60q", len(params), len(got), got)
		}
		// A medium is often larger than its image (a USB stick, a CD
		// padded by the BMC): trailing bytes are ignored.
		padded := append(append([]byte(nil), img...), make([]byte, 1<<20)...)
		if got, err := ReadParams(bytes.NewReader(padded), int64(len(padded))); err != nil || got != strings.TrimSpace(params) {
			t.Fatalf("padded image: %v %.60q", err, got)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, b := mustImage(t, sample), mustImage(t, sample)
	if !bytes.Equal(a, b) {
		t.Fatal("two images of the same parameters differ")
	}
	if c := mustImage(t, sample+" bm.debug"); bytes.Equal(a[:fileSector*SectorSize], c[:fileSector*SectorSize]) {
		t.Fatal("the file length is not recorded in the directory")
	}
}

func TestParamsImageRefuses(t *testing.T) {
	for name, params := range map[string]string{
		"too long": strings.Repeat("a", MaxParams+1),
		"NUL":      "bm.node=a\x00b",
		"newline":  "bm.node=a\nbm.site=b",
		"CR":       "bm.node=a\r",
		"control":  "bm.node=\x1b[31m",
		"DEL":      "bm.node=\x7f",
		"not UTF8": "bm.node=\xff",
	} {
		if _, err := ParamsImage(params); err == nil {
			t.Errorf("%s: ParamsImage accepted %.40q", name, params)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// needXorriso returns the path of xorriso, or skips (fails under make test).
func needXorriso(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("xorriso")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("xorriso is missing (scripts/install-test-deps.sh installs it): %v", err)
		}
		t.Skip("xorriso is missing; scripts/install-test-deps.sh installs it")
	}
	return p
}

// TestXorrisoReadsImage: an independent ISO9660 reader (libisofs, through
// xorriso and osirrox) sees the volume ID, the one file, and its text.
func TestXorrisoReadsImage(t *testing.T) {
	xorriso := needXorriso(t)
	dir := t.TempDir()
	for i, params := range []string{sample, strings.Repeat("z", MaxParams), ""} {
		iso := filepath.Join(dir, "params.iso")
		if err := os.WriteFile(iso, mustImage(t, params), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(xorriso, "-abort_on", "WARNING", "-indev", iso, "-pvd_info", "-find", "/", "-exec", "lsdl", "--").CombinedOutput()
		if err != nil {
			t.Fatalf("xorriso: %v\n%s", err, out)
		}
		if !regexp.MustCompile(`Volume [Ii]d *: '?BMPARAMS'?`).Match(out) {
			t.Fatalf("xorriso does not report the volume ID BMPARAMS:\n%s", out)
		}
		files := regexp.MustCompile(`(?m)^-\S+ .*'(/[^']*)'$`).FindAllSubmatch(out, -1)
		if len(files) != 1 || string(files[0][1]) != "/BMPARAMS.TXT" {
			t.Fatalf("xorriso lists files %q, want only /BMPARAMS.TXT:\n%s", files, out)
		}
		got := filepath.Join(dir, "out"+string(rune('0'+i)))
		osirrox := filepath.Join(filepath.Dir(xorriso), "osirrox")
		if _, err := os.Stat(osirrox); err != nil {
			osirrox = xorriso // xorriso acts as osirrox when told -osirrox on
		}
		args := []string{"-abort_on", "WARNING", "-indev", iso, "-extract", "/BMPARAMS.TXT", got}
		if osirrox == xorriso {
			args = append([]string{"-osirrox", "on"}, args...)
		}
		if out, err := exec.Command(osirrox, args...).CombinedOutput(); err != nil {
			t.Fatalf("osirrox -extract: %v\n%s", err, out)
		}
		b, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != params {
			t.Fatalf("osirrox extracted %d bytes %.60q, want %d bytes", len(b), b, len(params))
		}
	}
}

// TestReadsXorrisoImage: a parameters medium made by another tool (an
// operator's xorriso, a file ending in a newline, Rock Ridge and Joliet
// on) is read too.
func TestReadsXorrisoImage(t *testing.T) {
	xorriso := needXorriso(t)
	dir := t.TempDir()
	txt := filepath.Join(dir, "params.txt")
	if err := os.WriteFile(txt, []byte(sample+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.txt")
	if err := os.WriteFile(other, []byte("not this one\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, "x.iso")
	out, err := exec.Command(xorriso, "-outdev", iso, "-volid", VolumeID, "-joliet", "on",
		"-map", other, "/AAA.TXT", "-map", txt, "/"+FileName, "-map", other, "/ZZZ/BMPARAMS.TXT").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	b, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadParams(bytes.NewReader(b), int64(len(b)))
	if err != nil || got != sample {
		t.Fatalf("ReadParams of xorriso's image: %v %q", err, got)
	}
	// The same tool with another volume ID: not a parameters medium.
	iso2 := filepath.Join(dir, "y.iso")
	if out, err := exec.Command(xorriso, "-outdev", iso2, "-volid", "INSTALLER", "-map", txt, "/"+FileName).CombinedOutput(); err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	b, _ = os.ReadFile(iso2)
	if _, err := ReadParams(bytes.NewReader(b), int64(len(b))); !errors.Is(err, ErrNotParams) || !strings.Contains(err.Error(), `"INSTALLER"`) {
		t.Fatalf("an ISO with volume ID INSTALLER: %v", err)
	}
}

func TestReadParamsRefuses(t *testing.T) {
	good := mustImage(t, sample)
	root := rootSector * SectorSize
	fileRec := root + 34 + 34 // after "." and ".."
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	put32 := func(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v); binary.BigEndian.PutUint32(b[4:], v) }
	cases := []struct {
		name    string
		img     []byte
		size    int64 // 0: len(img)
		notISO  bool  // wraps ErrNotParams
		wantErr string
	}{
		{name: "empty", img: nil, notISO: true, wantErr: "too small"},
		{name: "truncated before the PVD", img: good[:pvdSector*SectorSize+100], notISO: true, wantErr: "too small"},
		{name: "zeroes", img: make([]byte, 1<<20), notISO: true, wantErr: "no CD001"},
		{name: "other volume ID", img: mut(func(b []byte) { copy(b[pvdSector*SectorSize+40:], "CDROM   ") }), notISO: true, wantErr: `volume ID "CDROM"`},
		{name: "no terminator, no PVD", img: mut(func(b []byte) { b[pvdSector*SectorSize] = 2; b[termSector*SectorSize] = 2 }), notISO: true, wantErr: "descriptor 18 has no CD001"},
		{name: "terminator first", img: mut(func(b []byte) { b[pvdSector*SectorSize] = 255 }), notISO: true, wantErr: "without a primary volume descriptor"},
		{name: "block size 512", img: mut(func(b []byte) {
			binary.LittleEndian.PutUint16(b[pvdSector*SectorSize+128:], 512)
			binary.BigEndian.PutUint16(b[pvdSector*SectorSize+130:], 512)
		}), wantErr: "logical block size 512"},
		{name: "halves differ", img: mut(func(b []byte) { b[fileRec+10+4] = 0xff }), wantErr: "halves differ"},
		{name: "root beyond the medium", img: mut(func(b []byte) { put32(b[pvdSector*SectorSize+156+2:], 1<<30) }), wantErr: "beyond the medium"},
		{name: "root too large", img: mut(func(b []byte) { put32(b[pvdSector*SectorSize+156+10:], 1<<31) }), wantErr: "root directory of"},
		{name: "root not a directory", img: mut(func(b []byte) { b[pvdSector*SectorSize+156+25] = 0 }), wantErr: "not a directory"},
		{name: "no file", img: mut(func(b []byte) { copy(b[fileRec+33:], "OTHERSXX") }), wantErr: "has no BMPARAMS.TXT"},
		{name: "file too large", img: mut(func(b []byte) { put32(b[fileRec+10:], MaxParams+1) }), wantErr: "more than 4096"},
		{name: "file beyond the medium", img: mut(func(b []byte) { put32(b[fileRec+2:], 1<<31) }), wantErr: "beyond the medium"},
		{name: "file cut off", img: good, size: int64(fileSector*SectorSize + 10), wantErr: "beyond the medium"},
		{name: "record overruns", img: mut(func(b []byte) { put32(b[pvdSector*SectorSize+156+10:], uint32(fileRec-root+20)) }), wantErr: "overruns"},
		{name: "record too short", img: mut(func(b []byte) { b[fileRec] = 20 }), wantErr: "too short"},
		{name: "identifier too long", img: mut(func(b []byte) { b[fileRec+32] = 200 }), wantErr: "does not fit"},
		{name: "NUL in the text", img: mut(func(b []byte) { b[fileSector*SectorSize+3] = 0 }), wantErr: "NUL"},
		{name: "newline in the text", img: mut(func(b []byte) { b[fileSector*SectorSize+3] = '\n' }), wantErr: "line break"},
		{name: "multi-extent", img: mut(func(b []byte) { b[fileRec+25] = 0x80 }), wantErr: "multi-extent"},
	}
	for _, c := range cases {
		size := c.size
		if size == 0 {
			size = int64(len(c.img))
		}
		_, err := ReadParams(bytes.NewReader(c.img), size)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) || errors.Is(err, ErrNotParams) != c.notISO {
			t.Errorf("%s: error %q, want one containing %q (not a parameters medium: %v)", c.name, err, c.wantErr, c.notISO)
		}
		t.Logf("%s: %v", c.name, err)
	}
}

// A reader that fails, as a device with a bad sector does.
type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("input/output error") }

func TestReadParamsReadError(t *testing.T) {
	_, err := ReadParams(failingReader{}, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "input/output error") || errors.Is(err, ErrNotParams) {
		t.Fatalf("a read error: %v", err)
	}
}
