package image

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/fetchrule"
	"github.com/bmedge/bmedge/agent/imagecache"
)

// TestWriteQcow2ThroughSiteCache: the ramdisk's qcow2 writer against the
// site's real image cache. The first node asks while the cache is still
// fetching the image from its origin: the cache answers its Range request
// with the whole stream (200), and the writer reads the tables from the
// stream. The next node finds the image cached: its Range requests are
// answered (206) and the tables read ahead. Both disks end up as the raw
// image.
func TestWriteQcow2ThroughSiteCache(t *testing.T) {
	needQemuImg(t)
	raw := holeyImage(3 << 20)
	qcow := qcowFixture(t, t.TempDir(), raw, "img.qcow2", "-c")
	gate := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(qcow)))
		w.Write(qcow[:len(qcow)-64<<10])
		w.(http.Flusher).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Write(qcow[len(qcow)-64<<10:])
	}))
	t.Cleanup(origin.Close)
	// The origin is on loopback, which the cache's fetch rule refuses
	// unless the operator allows it (agent --fetch-allow).
	rule := &fetchrule.Rule{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c, err := imagecache.Open(imagecache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, StallTimeout: 10 * time.Second, Rule: rule})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	rangeAnswers := map[int]int{}
	cache := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Counted as the answer starts: an answer of 200 to a Range
		// request streams on until the download ends.
		sw := &statusWriter{ResponseWriter: w, answered: func(status int) {
			if r.Header.Get("Range") != "" {
				mu.Lock()
				rangeAnswers[status]++
				mu.Unlock()
			}
		}}
		c.Handler().ServeHTTP(sw, r)
	}))
	t.Cleanup(cache.Close)
	sum, err := imagecache.ParseChecksum(sha256hex(qcow), "", "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := c.Register(origin.URL+"/img.qcow2", sum)
	if err != nil {
		t.Fatal(err)
	}
	url := cache.URL + imagecache.PathPrefix + token

	write := func() {
		t.Helper()
		dev := targetFile(t, len(raw)+4096)
		if _, err := Write(t.Context(), Source{URL: url}, dev, Options{Checksum: sha256hex(qcow), BufferBytes: 256 << 10}); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(dev.Path)
		if sha256hex(got[:len(raw)]) != sha256hex(raw) {
			t.Fatal("the disk differs from the raw image")
		}
	}
	// The origin holds the rest of the file until the first node's
	// download is under way and its Range request answered.
	go func() {
		for {
			mu.Lock()
			n := rangeAnswers[http.StatusOK]
			mu.Unlock()
			if n > 0 {
				close(gate)
				return
			}
			select {
			case <-t.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	write()
	mu.Lock()
	defer mu.Unlock()
	if rangeAnswers[http.StatusOK] == 0 || rangeAnswers[http.StatusPartialContent] != 0 {
		t.Fatalf("first node, image being fetched: Range answers %v, want 200s only", rangeAnswers)
	}
	clear(rangeAnswers)
	mu.Unlock()
	write()
	mu.Lock()
	if rangeAnswers[http.StatusPartialContent] == 0 || rangeAnswers[http.StatusOK] != 0 {
		t.Fatalf("second node, image cached: Range answers %v, want 206s only", rangeAnswers)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status   int
	answered func(int)
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
		s.answered(code)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
