package imagecache

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/bmedge/bmedge/lib/fetchwords"
)

// MaxReasonBytes bounds the reason a node reads in the body of an error
// answer.
const MaxReasonBytes = 1024

// Failure is why the cache could not get an image. Error is the whole
// account, for the agent's log and a pre-seed's result; Reason is one
// short line that the handler sends to the node in the body of its error
// answer, with Status: it names the image without credentials or query
// string and no path of the agent's machine, so a node's last_error can
// say what went wrong instead of "502" or "unexpected EOF".
type Failure struct {
	Status int    // the HTTP status the handler answers with
	Reason string // one line for the node, without secrets
	Err    error  // the whole account
}

// Error is the reason: what reaches the coordinator (a firmware
// update's or a pre-seed's last_error) names the image and what went
// wrong in words, never the origin's answer or a digest of what came
// back; the whole account (Err) is for the agent's log.
func (f *Failure) Error() string { return f.Reason }
func (f *Failure) Unwrap() error { return f.Err }

// failed wraps err with what the node is told.
func failed(status int, reason string, err error) *Failure {
	return &Failure{Status: status, Reason: oneLine(scrubURLs(reason), MaxReasonBytes-len(reasonPrefix)), Err: err}
}

const reasonPrefix = "site image cache: "

// answer is the status and body line of an error answer to a node.
func answer(err error) (int, string) {
	var f *Failure
	switch {
	case errors.As(err, &f):
		return f.Status, reasonPrefix + f.Reason
	case errors.Is(err, ErrUnknownImage):
		return http.StatusNotFound, reasonPrefix + "no such image (the URL's token is unknown or forgotten); run the deploy step again for a fresh URL"
	default:
		// Not a download failure (a read of the agent's own disk): its
		// text may name local paths, so it stays in the agent's log.
		return http.StatusInternalServerError, reasonPrefix + "internal error reading the image; see the edge agent's log"
	}
}

// nodeURL names an image for a node: scheme, host and path, never user
// information or the query string (often a signature), cut to a bounded
// length keeping the file name.
func nodeURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(unparsable URL)"
	}
	name := p.Scheme + "://" + p.Host
	const limit = 120
	path := p.EscapedPath()
	if len(name)+len(path) > limit {
		keep := max(limit-len(name)-2, 1)
		path = "/…" + path[max(len(path)-keep, 0):]
	}
	name += path
	if p.RawQuery != "" || p.ForceQuery {
		name += "?…"
	}
	return name
}

// scrubURLs replaces every URL-looking word of s by its nodeURL: an error
// of the HTTP stack may quote a URL (a proxy's, a redirect's).
func scrubURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	words := strings.Split(s, " ")
	for i, w := range words {
		if j := strings.Index(w, "://"); j > 0 {
			start := j
			for start > 0 && isSchemeByte(w[start-1]) {
				start--
			}
			end := len(w)
			for end > j && strings.ContainsRune(`"'),;:.`, rune(w[end-1])) {
				end--
			}
			words[i] = w[:start] + nodeURL(w[start:end]) + w[end:]
		}
	}
	return strings.Join(words, " ")
}

func isSchemeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '+' || b == '-' || b == '.'
}

// oneLine makes s a single line of printable text of at most limit bytes.
func oneLine(s string, limit int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == utf8.RuneError || r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		if r == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		b.WriteRune(r)
	}
	out := strings.TrimSpace(b.String())
	if len(out) > limit {
		cut := limit - len("…")
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

// hostOf is the host (and port) of a URL, without user information.
func hostOf(u string) string { return fetchwords.Host(u) }

// account is the whole account of err, for the agent's log.
func account(err error) error {
	var f *Failure
	if errors.As(err, &f) && f.Err != nil {
		return f.Err
	}
	return err
}
