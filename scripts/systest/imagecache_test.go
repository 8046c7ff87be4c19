package systest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// imageOrigin is the image server of the WAN side: it makes its image on
// the fly (blocks of random bytes, each stamped with its index) and
// counts the bytes and requests it serves.
type imageOrigin struct {
	size     int64
	block    []byte
	sum      string // sha256 hex of the image
	bytes    atomic.Int64
	requests atomic.Int64
	// gate holds every transfer after half the image until it is closed,
	// so that the nodes' requests meet the download while it runs.
	gate     chan struct{}
	gateOnce sync.Once
}

func newImageOrigin(size int64) *imageOrigin {
	o := &imageOrigin{size: size, block: make([]byte, 1<<20), gate: make(chan struct{})}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(o.block); i += 8 {
		binary.LittleEndian.PutUint64(o.block[i:], r.Uint64())
	}
	h := sha256.New()
	o.each(func(b []byte) bool { h.Write(b); return true })
	o.sum = hex.EncodeToString(h.Sum(nil))
	return o
}

// each calls f with the image's blocks in order until f says stop.
func (o *imageOrigin) each(f func([]byte) bool) {
	b := make([]byte, len(o.block))
	for off := int64(0); off < o.size; off += int64(len(b)) {
		copy(b, o.block)
		binary.LittleEndian.PutUint64(b, uint64(off))
		n := min(int64(len(b)), o.size-off)
		if !f(b[:n]) {
			return
		}
	}
}

func (o *imageOrigin) open() { o.gateOnce.Do(func() { close(o.gate) }) }

func (o *imageOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/image.raw" {
		http.NotFound(w, r)
		return
	}
	o.requests.Add(1)
	w.Header().Set("Content-Length", strconv.FormatInt(o.size, 10))
	var sent int64
	o.each(func(b []byte) bool {
		if sent == o.size/2 {
			select {
			case <-o.gate:
			case <-r.Context().Done():
				return false
			}
		}
		n, err := w.Write(b)
		sent += int64(n)
		o.bytes.Add(int64(n))
		return err == nil
	})
}

// cacheSite registers a site and starts its edge agent with n simulated
// nodes and an image cache in dir.
func cacheSite(t *testing.T, c *server.Coordinator, name, dir string, n int) {
	t.Helper()
	var creds agent.Credentials
	if code := testrig.NewClient(t, c).Do("POST", "/v1/sites", map[string]string{"name": name}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{
		Sim: agent.SimOptions{Nodes: n, StepDuration: 50 * time.Millisecond, BootDelay: 50 * time.Millisecond},
		Cache: agent.ImageCacheOptions{Dir: dir, Listen: "127.0.0.1:0", MaxBytes: 1 << 30,
			FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	})
}

// availableNodes enrols n nodes at site and brings them to available.
func availableNodes(t *testing.T, cl *testrig.Client, site string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, cl.CreateNode(fmt.Sprintf("%s-n%d", site, i), site, nil))
	}
	for _, verb := range []struct{ verb, want string }{{"manage", "manageable"}, {"provide", "available"}} {
		for _, id := range ids {
			cl.MustVerb(id, verb.verb, nil)
		}
		for _, id := range ids {
			if nd := cl.WaitRest(id, 60*time.Second); nd.State != verb.want {
				t.Fatalf("%s: node %s in %q (%q)", verb.verb, id, nd.State, nd.LastError)
			}
		}
	}
	return ids
}

func setImage(t *testing.T, cl *testrig.Client, id, url, checksum string) {
	t.Helper()
	patch := []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": url},
		{"op": "add", "path": "/instance_info/image_checksum", "value": checksum},
	}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, patch, nil); code != 200 {
		t.Fatalf("set image of %s: %d", id, code)
	}
}

// preseed asks the coordinator to pre-seed site and waits for the outcome.
func preseed(t *testing.T, cl *testrig.Client, site, url, checksum string) map[string]any {
	t.Helper()
	var st map[string]any
	if code := cl.Do("POST", "/v1/sites/"+site+"/cache", map[string]string{"url": url, "checksum": checksum}, &st); code != 202 || st["state"] != "pending" {
		t.Fatalf("pre-seed: %d %v", code, st)
	}
	id, _ := st["command_id"].(string)
	deadline := time.Now().Add(2 * time.Minute)
	for st["state"] == "pending" {
		if time.Now().After(deadline) {
			t.Fatalf("pre-seed still pending: %v", st)
		}
		time.Sleep(100 * time.Millisecond)
		if code := cl.Do("POST", "/v1/sites/"+site+"/cache", map[string]string{"command_id": id}, &st); code != 200 {
			t.Fatalf("pre-seed status: %d %v", code, st)
		}
	}
	return st
}

// getNode reads a node without failing the test (for a goroutine).
func getNode(c *server.Coordinator, id string) (testrig.Node, bool) {
	var n testrig.Node
	req, _ := http.NewRequest("GET", "http://"+c.APIAddr+"/v1/nodes/"+id, nil)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return n, false
	}
	defer resp.Body.Close()
	return n, resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&n) == nil
}

// cacheFiles lists the images in a cache folder (its key file aside).
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if de.Name() != "token.key" {
			out = append(out, de.Name())
		}
	}
	return out
}

// TestImageCache is the acceptance test of the site image cache: ten
// simulated nodes deploy one 256 MiB image at once through their edge
// agent's cache, and the origin serves it once; a wrong checksum fails
// every deploy with a clear last_error and leaves nothing in the cache.
func TestImageCache(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 256 MiB eleven times")
	}
	const nodes = 10
	const size = int64(256 << 20)
	o := newImageOrigin(size)
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	t.Cleanup(o.open)
	url := srv.URL + "/image.raw"
	good := "sha256:" + o.sum

	// The origin may hold the nodes in write_image for up to 60 s, and on a
	// busy machine (load 20 seen) the heartbeats of that wait come late:
	// the rig's 30 s WAIT timeout is not what this test is about.
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 3 * time.Minute}})
	cl := testrig.NewClient(t, c)
	dir1 := t.TempDir()
	cacheSite(t, c, "site1", dir1, nodes)
	ids := availableNodes(t, cl, "site1", nodes)
	for _, id := range ids {
		setImage(t, cl, id, url, good)
	}
	start := time.Now()
	for _, id := range ids {
		cl.MustVerb(id, "active", nil)
	}
	// The origin holds the second half until every node runs write_image
	// (its simulated ramdisk is fetching from the cache by then), or 60 s.
	stop := make(chan struct{})
	var joined atomic.Int64 // nodes in write_image when the origin went on
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer o.open()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			waiting := 0
			for _, id := range ids {
				if n, ok := getNode(c, id); ok && n.DeployStep["step"] == "write_image" && n.State == "wait call-back" {
					waiting++
				}
			}
			joined.Store(int64(waiting))
			if waiting == nodes {
				time.Sleep(300 * time.Millisecond)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	for _, id := range ids {
		if n := cl.WaitRest(id, 3*time.Minute); n.State != "active" {
			t.Fatalf("deploy of %s: %q, last_error %q", id, n.State, n.LastError)
		}
	}
	t.Logf("%d nodes deployed a %d MiB image through the cache in %s (%d were in write_image when the origin, holding half the image, went on)",
		nodes, size>>20, time.Since(start).Round(time.Millisecond), joined.Load())
	if r, b := o.requests.Load(), o.bytes.Load(); r != 1 || b != size {
		t.Fatalf("origin served %d requests, %d bytes; want 1 request, %d bytes (the image once)", r, b, size)
	}
	if f := cacheFiles(t, dir1); len(f) != 1 || !strings.HasSuffix(f[0], ".img") {
		t.Errorf("cache folder holds %v; want the one image", f)
	}

	// Pre-seeding the image the site has: answered from its disk.
	st := preseed(t, cl, "site1", url, good)
	if st["state"] != "cached" || st["already_cached"] != true || st["size"] != float64(size) {
		t.Errorf("pre-seed of a cached image: %v", st)
	}
	// The same through the command line.
	var out, errb bytes.Buffer
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "site", "cache", "site1", url, "--checksum", good, "--wait"}, nil, &out, &errb); rc != 0 ||
		!strings.Contains(out.String(), "already cached") {
		t.Errorf("site cache --wait: exit %d, out %q, err %q", rc, out.String(), errb.String())
	}
	if r := o.requests.Load(); r != 1 {
		t.Errorf("origin asked %d times", r)
	}
	// Bad requests are refused with a reason.
	var e map[string]any
	if code := cl.Do("POST", "/v1/sites/nosuch/cache", map[string]string{"url": url, "checksum": good}, &e); code != 404 {
		t.Errorf("unknown site: %d", code)
	}
	for _, body := range []map[string]string{{"url": url}, {"url": "ftp://x/y", "checksum": good}, {"url": url, "checksum": "sha256:12"}} {
		if code := cl.Do("POST", "/v1/sites/site1/cache", body, &e); code != 400 {
			t.Errorf("%v: %d", body, code)
		}
	}
	// md5 the cache could verify, but no deploy takes it: refused, saying
	// what to give.
	if code := cl.Do("POST", "/v1/sites/site1/cache", map[string]string{"url": url, "checksum": "md5:" + strings.Repeat("0", 32)}, &e); code != 400 ||
		!strings.Contains(fmt.Sprint(e), "md5") || !strings.Contains(fmt.Sprint(e), "sha256:HEX") {
		t.Errorf("pre-seed with md5: %d %v", code, e)
	}

	// A wrong checksum: every deploy fails, saying why, and the cache of
	// the site keeps nothing.
	dir2 := t.TempDir()
	cacheSite(t, c, "site2", dir2, nodes)
	ids2 := availableNodes(t, cl, "site2", nodes)
	bad := "sha256:" + strings.Repeat("0", 64)
	for _, id := range ids2 {
		setImage(t, cl, id, url, bad)
	}
	for _, id := range ids2 {
		cl.MustVerb(id, "active", nil)
	}
	for _, id := range ids2 {
		n := cl.WaitRest(id, 3*time.Minute)
		// The digest of what the origin sent is never told (a digest
		// of an answer is an oracle of its content); the one given is.
		if n.State != "deploy failed" || !strings.Contains(n.LastError, "checksum mismatch") || strings.Contains(n.LastError, o.sum) ||
			!strings.Contains(n.LastError, strings.Repeat("0", 64)) {
			t.Errorf("deploy of %s with a wrong checksum: %q, last_error %q", id, n.State, n.LastError)
		}
	}
	t.Logf("last_error of a node: %s", cl.Get(ids2[0]).LastError)
	if f := cacheFiles(t, dir2); len(f) != 0 {
		t.Errorf("cache folder holds %v after a failed checksum", f)
	}
	// A pre-seed with the wrong checksum fails the same way.
	st = preseed(t, cl, "site2", url, bad)
	if st["state"] != "failed" || !strings.Contains(fmt.Sprint(st["error"]), "checksum mismatch") {
		t.Errorf("pre-seed with a wrong checksum: %v", st)
	}
	if f := cacheFiles(t, dir2); len(f) != 0 {
		t.Errorf("cache folder holds %v after a failed pre-seed", f)
	}
}
