package imagecache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// answerOf fetches url as a node would and returns the status and the
// body of the answer, read to its end.
func answerOf(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of a %s answer: %v", resp.Status, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// loopbackAddr matches the test servers' addresses in a reason.
var loopbackAddr = regexp.MustCompile(`127\.0\.0\.\d+:\d+`)

// checkReason checks the body of an error answer: one line of plain
// text, bounded, saying each of want, showing none of secrets.
func checkReason(t *testing.T, h http.Header, body string, want, secrets []string) {
	t.Helper()
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	line := strings.TrimSuffix(body, "\n")
	if strings.ContainsAny(line, "\r\n") || line == "" {
		t.Errorf("body %q is not one line", body)
	}
	if len(line) > MaxReasonBytes {
		t.Errorf("body of %d bytes, over MaxReasonBytes", len(line))
	}
	if !strings.HasPrefix(line, "site image cache: ") {
		t.Errorf("body %q does not say it is the site cache's", line)
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("body %q does not say %q", line, w)
		}
	}
	// What the line tells beside the loopback addresses it names (a
	// port such as 34042 holds "404").
	told := loopbackAddr.ReplaceAllString(line, "ADDR")
	for _, s := range secrets {
		if strings.Contains(told, s) {
			t.Errorf("body %q shows %q", line, s)
		}
	}
}

// TestErrorAnswerCarriesReason: when the cache cannot serve an image, a
// node reading the answer's body learns why (with what to do), and the
// status says which kind of failure it is.
func TestErrorAnswerCarriesReason(t *testing.T) {
	o := newOrigin(t, 4096)
	secret := []string{"user", "pw", "sig=", "s3cr3t"}
	withSecrets := func(base, path string) string {
		return strings.Replace(base, "http://", "http://user:pw@", 1) + path + "?sig=s3cr3t"
	}
	// A port where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	// An origin that answers the headers and then sends nothing.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4096")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(stall.Close)
	big := newOrigin(t, 64<<10)

	for _, tc := range []struct {
		name   string
		url    string
		sum    Checksum
		status int
		want   []string
		never  []string // an internal answer's status line or a digest of what came back
	}{
		{"origin refused", withSecrets(o.srv.URL, "/nope.raw"), o.sum(), http.StatusBadGateway,
			[]string{"did not answer with the image", "/nope.raw", "?…", "check instance_info image_source"}, []string{"404", "Not Found"}},
		{"origin unreachable", withSecrets(closed, "/image.raw"), o.sum(), http.StatusBadGateway,
			[]string{"cannot fetch image", "connection was refused", "WAN link"}, nil},
		{"checksum mismatch", o.url(), badSum(), http.StatusBadGateway,
			[]string{"checksum mismatch", badSum().Hex, "not cached", "fix the image"}, []string{o.sum().Hex}},
		{"origin stalled", stall.URL + "/image.raw", o.sum(), http.StatusGatewayTimeout,
			[]string{"sent nothing for 300ms", "retry"}, nil},
		{"no room", big.url(), big.sum(), http.StatusInsufficientStorage,
			[]string{"larger than the whole site cache", "--image-cache-size"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := Open(Options{Dir: dir, MaxBytes: 32 << 10, StallTimeout: 300 * time.Millisecond, Rule: loopbackRule})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			base := serveCache(t, c)
			token, err := c.Register(tc.url, tc.sum)
			if err != nil {
				t.Fatal(err)
			}
			// The first node starts the download, the second is answered
			// from the cache's memory of the failure: both learn why.
			for _, who := range []string{"first", "second"} {
				if who == "first" && tc.name == "checksum mismatch" {
					// The mismatch shows only at the image's end: the
					// first node may have been streamed to already,
					// and then its transfer is cut (never complete).
					resp, err := http.Get(base + PathPrefix + token)
					if err != nil {
						t.Fatalf("GET: %v", err)
					}
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						if rerr == nil {
							t.Fatalf("first node: a mismatching image was served complete (%d bytes)", len(b))
						}
						continue
					}
					if resp.StatusCode != tc.status {
						t.Errorf("first node: status %d, want %d or a cut transfer", resp.StatusCode, tc.status)
					}
					checkReason(t, resp.Header, string(b), tc.want, append(tc.never, secret...))
					continue
				}
				status, h, body := answerOf(t, base+PathPrefix+token)
				if status != tc.status {
					t.Errorf("%s node: status %d, want %d (body %q)", who, status, tc.status, body)
				}
				checkReason(t, h, body, tc.want, append(tc.never, secret...))
				if who == "first" {
					t.Logf("%d %s", status, body)
				}
			}
			if f := files(t, dir); len(f) != 0 {
				t.Errorf("cache folder holds %v", f)
			}
			// The agent's own account (log, pre-seed) keeps the whole story.
			_, err = c.Fetch(context.Background(), tc.url, tc.sum)
			var f *Failure
			if !errors.As(err, &f) || f.Status != tc.status {
				t.Errorf("pre-seed error %v, want a Failure with status %d", err, tc.status)
			}
		})
	}

	t.Run("unknown token", func(t *testing.T) {
		c := openCache(t, t.TempDir(), 1<<20)
		status, h, body := answerOf(t, serveCache(t, c)+PathPrefix+strings.Repeat("0", 32))
		if status != http.StatusNotFound {
			t.Errorf("status %d", status)
		}
		checkReason(t, h, body, []string{"no such image"}, nil)
	})
}

// TestMismatchAfterStreamingBegan: when the checksum fails after the
// answer began, a node reading the body sees its transfer fail (never a
// clean end, whether the length was announced or not), and asking again
// gives the reason in the body of an error answer.
func TestMismatchAfterStreamingBegan(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			const size = 4 << 20
			o := newOrigin(t, size)
			o.chunked = chunked
			o.gate = make(chan struct{})
			c := openCache(t, t.TempDir(), 1<<30)
			base := serveCache(t, c)
			token, err := c.Register(o.url(), badSum())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(base + PathPrefix + token)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d before the checksum could be known", resp.StatusCode)
			}
			if chunked != (resp.ContentLength < 0) {
				t.Errorf("Content-Length %d with an origin chunked=%v", resp.ContentLength, chunked)
			}
			close(o.gate)
			n, err := io.Copy(io.Discard, resp.Body)
			if err == nil {
				t.Fatalf("the transfer of an image whose checksum failed ended cleanly after %d bytes", n)
			}
			if n >= size {
				t.Errorf("the node got all %d bytes", n)
			}
			status, h, body := answerOf(t, base+PathPrefix+token)
			if status != http.StatusBadGateway {
				t.Errorf("asking again: status %d", status)
			}
			// The digest of what came back is never told: a digest of
			// an answer is an oracle of its content.
			checkReason(t, h, body, []string{"checksum mismatch", badSum().Hex}, []string{o.sum().Hex})
		})
	}
}

func TestReasonText(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:pw@img.example/a/b.raw?sig=x": "http://img.example/a/b.raw?…",
		"https://img.example":                   "https://img.example",
		"http://img.example/" + strings.Repeat("d/", 100) + "noble.raw": "http://img.example/…" +
			("/" + strings.Repeat("d/", 100) + "noble.raw")[len("/"+strings.Repeat("d/", 100)+"noble.raw")-(120-len("http://img.example")-2):],
		"::": "(unparsable URL)",
	} {
		if got := nodeURL(in); got != want {
			t.Errorf("nodeURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := scrubURLs(`proxyconnect to "http://u:pw@proxy:3128/?k=v", then x`); got != `proxyconnect to "http://proxy:3128/?…", then x` {
		t.Errorf("scrubURLs: %q", got)
	}
	if got := oneLine("a\r\nb\t\x00 c  d\u2028é", 100); got != "a b c d é" {
		t.Errorf("oneLine: %q", got)
	}
	if got := oneLine(strings.Repeat("é", 100), 11); got != "éééé…" {
		t.Errorf("oneLine cut: %q (%d bytes)", got, len(got))
	}
	f := failed(502, strings.Repeat("x", 5000), errors.New("whole"))
	if len(reasonPrefix+f.Reason) > MaxReasonBytes || f.Error() != f.Reason || f.Err.Error() != "whole" {
		t.Errorf("failure of %d bytes, %q (%v)", len(f.Reason), f.Error(), f.Err)
	}
}
