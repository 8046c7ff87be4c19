package configdrive

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	cd "github.com/bmedge/bmedge/coordinator/configdrive"
)

func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (Debian package %s; scripts/install-test-deps.sh installs it)", name, pkg)
		}
		t.Skipf("%s is missing: install Debian's %s (scripts/install-test-deps.sh)", name, pkg)
	}
	return p
}

// disk makes an image file of size bytes partitioned by sfdisk with
// script, then grows it to grow bytes (the image written to a larger
// disk).
func disk(t *testing.T, size, grow int64, script string) string {
	t.Helper()
	sfdisk := needTool(t, "sfdisk", "fdisk")
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(sfdisk, "-q", p)
	c.Stdin = strings.NewReader(script)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	if err := os.Truncate(p, grow); err != nil {
		t.Fatal(err)
	}
	return p
}

type sfPart struct {
	Node  string `json:"node"`
	Start int64  `json:"start"`
	Size  int64  `json:"size"`
	Type  string `json:"type"`
	Name  string `json:"name"`
}

// table reads the partition table with sfdisk --json (an independent
// reader), failing on anything sfdisk warns about.
func table(t *testing.T, p string) (label string, parts []sfPart) {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", p).CombinedOutput()
	if err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("GPT PMBR size mismatch")) || bytes.Contains(out, []byte("backup GPT table is not on the end")) {
		t.Fatalf("sfdisk complains about the table:\n%s", out)
	}
	var v struct {
		PT struct {
			Label      string   `json:"label"`
			Partitions []sfPart `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out[bytes.IndexByte(out, '{'):], &v); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	if out, err := exec.Command("sfdisk", "--verify", p).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("No errors detected")) {
		t.Fatalf("sfdisk --verify: %v\n%s", err, out)
	}
	return v.PT.Label, v.PT.Partitions
}

// labelAt reads the file system label at a byte offset with blkid.
func labelAt(t *testing.T, p string, off int64) string {
	t.Helper()
	out, _ := exec.Command("blkid", "-p", "-O", itoa(off), "-s", "LABEL", "-o", "value", p).Output()
	return strings.TrimSpace(string(out))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func drive(t *testing.T, host string) []byte {
	t.Helper()
	img, err := cd.BuildISO(Label, map[string][]byte{"openstack/latest/meta_data.json": []byte(`{"hostname":"` + host + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestNewPartitionGPT: a GPT image written to a larger disk gets a
// partition in the last 64 MiB holding the drive; sfdisk sees the backup
// GPT at the disk's end and the new partition, blkid the label.
func TestNewPartitionGPT(t *testing.T) {
	p := disk(t, 8<<20, 200<<20, "label: gpt\nstart=2048, size=8192, type=L\n")
	img := drive(t, "g1")
	res, err := Write(p, 512, img)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Table != "gpt" || res.Partition != 2 || res.Size < 63<<20 || res.Offset+res.Size > 200<<20 {
		t.Fatalf("result %+v", res)
	}
	lbl, parts := table(t, p)
	if lbl != "gpt" || len(parts) != 2 || parts[1].Start*512 != res.Offset || parts[1].Name != "config-2" {
		t.Fatalf("sfdisk shows %s %+v, want 2 partitions, the second at %d named config-2", lbl, parts, res.Offset)
	}
	if got := labelAt(t, p, res.Offset); got != "config-2" {
		t.Fatalf("blkid label at the new partition: %q", got)
	}
	// Idempotent: a second write finds the config-2 partition.
	res2, err := Write(p, 512, drive(t, "g2"))
	if err != nil || res2.Created || res2.Partition != 2 {
		t.Fatalf("second write: %+v %v", res2, err)
	}
	if _, parts := table(t, p); len(parts) != 2 {
		t.Fatalf("second write added a partition: %+v", parts)
	}
}

// TestNewPartitionMBR: an MBR image gets a primary partition in the last
// 64 MiB of the disk.
func TestNewPartitionMBR(t *testing.T) {
	p := disk(t, 8<<20, 200<<20, "label: dos\nstart=2048, size=8192, type=83\n")
	res, err := Write(p, 512, drive(t, "m1"))
	if err != nil {
		t.Fatal(err)
	}
	lbl, parts := table(t, p)
	if lbl != "dos" || len(parts) != 2 || parts[1].Start*512 != res.Offset || parts[1].Start+parts[1].Size != (200<<20)/512 {
		t.Fatalf("sfdisk shows %s %+v; result %+v", lbl, parts, res)
	}
	if got := labelAt(t, p, res.Offset); got != "config-2" {
		t.Fatalf("blkid label at the new partition: %q", got)
	}
}

// TestExistingPartition: an image with its own config-2 partition gets
// the drive there, and no new partition.
func TestExistingPartition(t *testing.T) {
	for _, tbl := range []string{"gpt", "dos"} {
		p := disk(t, 200<<20, 200<<20, "label: "+tbl+"\nstart=2048, size=8192\nstart=12288, size=4096\n")
		old := drive(t, "old")
		f, _ := os.OpenFile(p, os.O_RDWR, 0)
		f.WriteAt(old, 12288*512)
		f.Close()
		res, err := Write(p, 512, drive(t, "new"))
		if err != nil || res.Created || res.Partition != 2 || res.Offset != 12288*512 {
			t.Fatalf("%s: %+v %v", tbl, res, err)
		}
		if _, parts := table(t, p); len(parts) != 2 {
			t.Fatalf("%s: a partition was added: %+v", tbl, parts)
		}
		b := make([]byte, 64<<10)
		f, _ = os.Open(p)
		f.ReadAt(b, 12288*512)
		f.Close()
		if !bytes.Contains(b, []byte(`"hostname":"new"`)) {
			t.Fatalf("%s: the config-2 partition does not hold the new drive", tbl)
		}
	}
}

// TestRefusals: each case where IPA gives up fails with a message that
// says why.
func TestRefusals(t *testing.T) {
	img := drive(t, "x")
	for _, c := range []struct {
		name, script string
		want         string
	}{
		{"mbr-full", "label: dos\nstart=2048, size=2048\nstart=4096, size=2048\nstart=6144, size=2048\nstart=8192, size=2048\n", "already has 4 primary partitions"},
		{"end-taken", "label: gpt\nstart=2048\n", "overlap partition 1"},
		{"mbr-end-taken", "label: dos\nstart=2048\n", "overlap partition 1"},
	} {
		p := disk(t, 200<<20, 200<<20, c.script)
		if _, err := Write(p, 512, img); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	p := filepath.Join(t.TempDir(), "blank")
	os.WriteFile(p, make([]byte, 100<<20), 0o600)
	if _, err := Write(p, 512, img); err == nil || !strings.Contains(err.Error(), "no partition table") {
		t.Errorf("blank disk: %v", err)
	}
}

// TestImage: the forms Ironic hands to IPA.
func TestImage(t *testing.T) {
	iso := drive(t, "i")
	enc, _ := cd.Encode(iso)
	ctx := context.Background()
	if got, err := Image(ctx, enc, Options{}); err != nil || !bytes.Equal(got, iso) {
		t.Fatalf("base64 gzip: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/enc":
			w.Write([]byte(enc))
		case "/raw":
			w.Write(iso)
		case "/big":
			w.Write(make([]byte, maxDownload+10))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, p := range []string{"/enc", "/raw"} {
		if got, err := Image(ctx, srv.URL+p+"?sig=secret", Options{}); err != nil || !bytes.Equal(got, iso) {
			t.Fatalf("URL %s: %v", p, err)
		}
	}
	if _, err := Image(ctx, srv.URL+"/missing?sig=secret", Options{}); err == nil || !strings.Contains(err.Error(), "did not answer with the config drive (not 200 OK: not found)") ||
		strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "Not Found") {
		t.Fatalf("404: %v (must say not found in words, not the status line nor the query)", err)
	}
	if _, err := Image(ctx, srv.URL+"/big", Options{}); err == nil || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("oversized download: %v", err)
	}
	if _, err := Image(ctx, "aGVsbG8=", Options{}); err == nil || !strings.Contains(err.Error(), "not gzip") {
		t.Fatalf("base64 of no gzip: %v", err)
	}
}

// TestSiteCacheReason: a config drive URL the site cache refuses fails
// with the cache's one-line reason (what its fetch rule refused); another
// server's status line and error body are not repeated, nor the
// addresses of a connection refused.
func TestSiteCacheReason(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cache" {
			http.Error(w, "site image cache: the config drive from 127.0.0.1:9100 was not passed on: it is a loopback address (--fetch-allow)", http.StatusForbidden)
			return
		}
		http.Error(w, "internal: secret stack trace", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	_, err := Image(context.Background(), srv.URL+"/cache", Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot download config drive "+srv.URL+"/cache: site image cache: the config drive from 127.0.0.1:9100 was not passed on") ||
		strings.Contains(err.Error(), "403") {
		t.Errorf("refused by the site cache: %v", err)
	}
	_, err = Image(context.Background(), srv.URL+"/other", Options{})
	if err == nil || !strings.Contains(err.Error(), "the origin "+strings.TrimPrefix(srv.URL, "http://")+" of config drive "+srv.URL+"/other did not answer with the config drive (not 200 OK: a server error)") ||
		strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "500") {
		t.Errorf("refused by another server: %v", err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = Image(context.Background(), dead.URL+"/cd", Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot download the config drive from "+dead.URL+"/cd: the connection was refused") || strings.Contains(err.Error(), "dial") {
		t.Errorf("connection refused: %v", err)
	}
}
