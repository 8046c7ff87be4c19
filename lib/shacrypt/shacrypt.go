// Package shacrypt implements the SHA-crypt password hashes of glibc's
// crypt(3) ("$6$" SHA-512 and "$5$" SHA-256, as specified by Ulrich
// Drepper's "Unix crypt using SHA-256 and SHA-512"): the form Ironic keeps
// a rescue password in (hashed_rescue_password) and hands to the ramdisk.
// It has no dependencies beyond the standard library, so that both the
// coordinator (which hashes) and the ramdisk (which checks) can use it.
package shacrypt

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

const (
	// DefaultRounds is crypt(3)'s default; it is not written into a hash.
	DefaultRounds = 5000
	minRounds     = 1000
	// MaxRounds bounds the work a hash can ask of Verify. crypt(3) allows
	// up to 999,999,999; more than this is refused as a denial of service.
	MaxRounds = 1_000_000
	// MaxPasswordLen bounds the work a password can ask (crypt(3) has no
	// limit; the rounds hash the password each time).
	MaxPasswordLen = 256
	maxSaltLen     = 16
	alphabet       = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

type algo struct {
	id   string
	new  func() hash.Hash
	size int
	// perm is the order in which the digest's bytes are encoded, three at a time.
	perm [][3]int
	tail []int // the last bytes: one (SHA-512) or two (SHA-256)
}

var sha512Algo = algo{id: "6", new: sha512.New, size: 64, perm: [][3]int{
	{0, 21, 42}, {22, 43, 1}, {44, 2, 23}, {3, 24, 45}, {25, 46, 4}, {47, 5, 26}, {6, 27, 48},
	{28, 49, 7}, {50, 8, 29}, {9, 30, 51}, {31, 52, 10}, {53, 11, 32}, {12, 33, 54}, {34, 55, 13},
	{56, 14, 35}, {15, 36, 57}, {37, 58, 16}, {59, 17, 38}, {18, 39, 60}, {40, 61, 19}, {62, 20, 41}},
	tail: []int{63}}

var sha256Algo = algo{id: "5", new: sha256.New, size: 32, perm: [][3]int{
	{0, 10, 20}, {21, 1, 11}, {12, 22, 2}, {3, 13, 23}, {24, 4, 14}, {15, 25, 5}, {6, 16, 26},
	{27, 7, 17}, {18, 28, 8}, {9, 19, 29}},
	tail: []int{31, 30}}

// ErrMismatch is returned by Verify when the password is not the one hashed.
var ErrMismatch = errors.New("shacrypt: wrong password")

// Hash returns the SHA-512 crypt hash ("$6$salt$...") of password with a
// new random 16-character salt and the default rounds.
func Hash(password string) (string, error) {
	if len(password) > MaxPasswordLen {
		return "", fmt.Errorf("a password of %d bytes is longer than the %d allowed", len(password), MaxPasswordLen)
	}
	b := make([]byte, maxSaltLen)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	salt := make([]byte, maxSaltLen)
	for i, x := range b {
		salt[i] = alphabet[int(x)&63]
	}
	return crypt(sha512Algo, []byte(password), salt, DefaultRounds, false), nil
}

// parsed is a hash split into its parts.
type parsed struct {
	a            algo
	salt         []byte
	rounds       int
	roundsGiven  bool
	encodedValue string
}

func parse(h string) (parsed, error) {
	var p parsed
	switch {
	case strings.HasPrefix(h, "$6$"):
		p.a = sha512Algo
	case strings.HasPrefix(h, "$5$"):
		p.a = sha256Algo
	default:
		return p, errors.New(`shacrypt: not a SHA-crypt hash (want "$6$..." or "$5$...")`)
	}
	rest := h[3:]
	p.rounds = DefaultRounds
	if strings.HasPrefix(rest, "rounds=") {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			return p, errors.New("shacrypt: rounds= without a salt")
		}
		n, err := strconv.Atoi(rest[len("rounds="):i])
		if err != nil || n < 1 {
			return p, fmt.Errorf("shacrypt: bad rounds %q", rest[len("rounds="):i])
		}
		if n > MaxRounds {
			return p, fmt.Errorf("shacrypt: %d rounds is more than the %d allowed", n, MaxRounds)
		}
		p.rounds, p.roundsGiven = max(n, minRounds), true
		rest = rest[i+1:]
	}
	i := strings.IndexByte(rest, '$')
	if i < 0 {
		return p, errors.New("shacrypt: no '$' after the salt")
	}
	p.salt = []byte(rest[:min(i, maxSaltLen)])
	p.encodedValue = rest[i+1:]
	want := (p.a.size*8 + 5) / 6
	if len(p.encodedValue) != want || strings.Trim(p.encodedValue, alphabet) != "" {
		return p, fmt.Errorf("shacrypt: the hash value is not %d characters of crypt's alphabet", want)
	}
	return p, nil
}

// Check reports whether h is a SHA-crypt hash this package can verify.
func Check(h string) error {
	_, err := parse(h)
	return err
}

// Verify reports whether password hashes to h, comparing in constant time.
func Verify(h, password string) error {
	p, err := parse(h)
	if err != nil {
		return err
	}
	if len(password) > MaxPasswordLen {
		return ErrMismatch
	}
	got := crypt(p.a, []byte(password), p.salt, p.rounds, p.roundsGiven)
	if subtle.ConstantTimeCompare([]byte(got), []byte(h)) != 1 {
		return ErrMismatch
	}
	return nil
}

// crypt is the algorithm of Drepper's specification, steps 1 to 22.
func crypt(a algo, pw, salt []byte, rounds int, roundsGiven bool) string {
	sum := func(parts ...[]byte) []byte {
		h := a.new()
		for _, p := range parts {
			h.Write(p)
		}
		return h.Sum(nil)
	}
	b := sum(pw, salt, pw)
	h := a.new()
	h.Write(pw)
	h.Write(salt)
	n := len(pw)
	for ; n > a.size; n -= a.size {
		h.Write(b)
	}
	h.Write(b[:n])
	for n = len(pw); n > 0; n >>= 1 {
		if n&1 != 0 {
			h.Write(b)
		} else {
			h.Write(pw)
		}
	}
	acc := h.Sum(nil)

	h = a.new()
	for range len(pw) {
		h.Write(pw)
	}
	p := repeat(h.Sum(nil), len(pw))
	h = a.new()
	for range 16 + int(acc[0]) {
		h.Write(salt)
	}
	s := repeat(h.Sum(nil), len(salt))

	for i := range rounds {
		h = a.new()
		if i&1 != 0 {
			h.Write(p)
		} else {
			h.Write(acc)
		}
		if i%3 != 0 {
			h.Write(s)
		}
		if i%7 != 0 {
			h.Write(p)
		}
		if i&1 != 0 {
			h.Write(acc)
		} else {
			h.Write(p)
		}
		acc = h.Sum(acc[:0])
	}

	var out strings.Builder
	out.WriteString("$" + a.id + "$")
	if roundsGiven {
		out.WriteString("rounds=" + strconv.Itoa(rounds) + "$")
	}
	out.Write(salt)
	out.WriteByte('$')
	enc := func(b2, b1, b0 byte, n int) {
		w := uint(b2)<<16 | uint(b1)<<8 | uint(b0)
		for range n {
			out.WriteByte(alphabet[w&63])
			w >>= 6
		}
	}
	for _, t := range a.perm {
		enc(acc[t[0]], acc[t[1]], acc[t[2]], 4)
	}
	if len(a.tail) == 1 {
		enc(0, 0, acc[a.tail[0]], 2)
	} else {
		enc(0, acc[a.tail[0]], acc[a.tail[1]], 3)
	}
	return out.String()
}

// repeat is the digest d repeated to n bytes (steps 16 and 20).
func repeat(d []byte, n int) []byte {
	out := make([]byte, 0, n)
	for len(out) < n {
		out = append(out, d[:min(len(d), n-len(out))]...)
	}
	return out
}
