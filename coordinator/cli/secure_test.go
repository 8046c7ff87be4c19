package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// runCLI runs the command line in this process.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// clearOSEnv keeps the caller's OS_* variables out of the test.
func clearOSEnv(t *testing.T) {
	for _, k := range []string{"OS_USERNAME", "OS_PASSWORD", "OS_CACERT", "COORDINATOR_URL"} {
		t.Setenv(k, "")
	}
}

// TestServeRefusesUnsafeAPI checks that serve refuses, before it opens
// anything, an API without authentication on a non-loopback address, and
// security options that contradict each other, saying what to do.
func TestServeRefusesUnsafeAPI(t *testing.T) {
	clearOSEnv(t)
	htpasswd := testrig.HTPasswd(t, map[string]string{"op": "pw"})
	md5 := filepath.Join(t.TempDir(), "md5")
	if err := os.WriteFile(md5, []byte("op:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--auth", "none", "--api-listen", "0.0.0.0:0"},
			[]string{"refusing to serve the API without authentication on 0.0.0.0:0", "only on a loopback address", "--auth http_basic --htpasswd FILE"}},
		{[]string{"--api-listen", ":0"}, []string{"refusing to serve the API without authentication on :0"}},
		{[]string{"--auth", "none", "--api-listen", "[::]:0"}, []string{"without authentication on [::]:0"}},
		{[]string{"--auth", "none", "--api-listen", "192.0.2.1:6385"}, []string{"without authentication on 192.0.2.1:6385"}},
		{[]string{"--auth", "http_basic"}, []string{"--auth http_basic needs --htpasswd FILE"}},
		{[]string{"--auth", "http_basic", "--htpasswd", md5}, []string{"line 1", "not a bcrypt hash", "htpasswd -B"}},
		{[]string{"--auth", "keystone"}, []string{`--auth "keystone" is not known`}},
		{[]string{"--htpasswd", htpasswd}, []string{"--auth is none"}},
		{[]string{"--tls-cert", htpasswd}, []string{"needs both --tls-cert and --tls-key"}},
		{[]string{"--tls-cert", htpasswd, "--tls-key", htpasswd}, []string{"cannot load the API's TLS certificate"}},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := append([]string{"serve", "--data-dir", data, "--mqtt-listen", testrig.FreeAddr(t)}, c.args...)
		code, _, stderr := runCLI(args...)
		if code != 1 {
			t.Errorf("serve %v: exit %d, want 1; stderr:\n%s", c.args, code, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("serve %v: stderr does not say %q:\n%s", c.args, w, stderr)
			}
		}
		if strings.Contains(stderr, "$apr1$") {
			t.Errorf("serve %v: the error shows the hash:\n%s", c.args, stderr)
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("serve %v: refused, but made the data folder", c.args)
		}
	}
}

// TestCertsCommand makes the lab certificates, checks the printed pin
// against the file, and checks that they are not overwritten by accident.
func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	code, out, stderr := runCLI("certs", "--dir", dir)
	if code != 0 {
		t.Fatalf("certs: exit %d\n%s", code, stderr)
	}
	ca, err := certs.ReadCertFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ca pin: sha256/" + certs.Pin(ca) + "\n"; !strings.Contains(out, want) {
		t.Fatalf("certs printed\n%s\nwithout %q", out, want)
	}
	srv, err := certs.ReadCertFile(filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(srv.DNSNames) != "[localhost]" || len(srv.IPAddresses) != 3 {
		t.Fatalf("server cert names: %v %v", srv.DNSNames, srv.IPAddresses)
	}
	for _, f := range []string{"ca-key.pem", "server-key.pem"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	code, _, stderr = runCLI("certs", "--dir", dir)
	if code != 1 || !strings.Contains(stderr, "already exist") || !strings.Contains(stderr, "--force") {
		t.Fatalf("certs into a full folder: exit %d, stderr %q", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(before, after) {
		t.Fatal("a refused certs run changed ca.pem")
	}
	code, out, stderr = runCLI("certs", "--dir", dir, "--force", "--host", "coord.example", "--host", "192.0.2.9")
	if code != 0 || strings.Contains(out, certs.Pin(ca)) {
		t.Fatalf("certs --force: exit %d (%s), printed the old pin:\n%s", code, stderr, out)
	}
	srv, _ = certs.ReadCertFile(filepath.Join(dir, "server.pem"))
	if fmt.Sprint(srv.DNSNames) != "[coord.example]" || len(srv.IPAddresses) != 1 || srv.IPAddresses[0].String() != "192.0.2.9" {
		t.Fatalf("--host: server cert names %v %v", srv.DNSNames, srv.IPAddresses)
	}
	if code, _, stderr := runCLI("certs"); code != 2 || !strings.Contains(stderr, "--dir DIR") {
		t.Fatalf("certs without --dir: exit %d, %q; want 2, a usage error", code, stderr)
	}
	if code, _, stderr := runCLI("certs", "--dir", t.TempDir(), "--host", "a b"); code != 1 || !strings.Contains(stderr, `"a b"`) {
		t.Fatalf("certs --host 'a b': exit %d, %q", code, stderr)
	}
}

// lockedBuffer collects a child's output from another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// serveProcess runs `coordinator serve args...` as a child process (this
// test binary stands in for the program), waits for its "coordinator
// serving" line and returns the API URL printed there, and its log. The
// child is stopped at cleanup, killed if it does not stop.
func serveProcess(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "BM_TEST_AS_COORDINATOR=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	urlc := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		re := regexp.MustCompile(`msg="coordinator serving" api=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.mu.Lock()
			logs.b.WriteString(sc.Text() + "\n")
			logs.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		stopped := make(chan struct{})
		go func() { <-done; _ = cmd.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-stopped
		}
		t.Logf("coordinator log:\n%s", logs.String())
	})
	select {
	case u := <-urlc:
		return u, logs
	case <-done:
		t.Fatalf("coordinator serve exited before serving:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("coordinator serve did not start in 30 s:\n%s", logs.String())
	}
	return "", nil
}

// curl runs curl and returns its exit status, stdout and stderr.
func curl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/curl", append([]string{"-sS", "--noproxy", "*"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// TestTLSAndCredentials serves the API over TLS with http_basic, as an
// operator would set it up (coordinator certs, then serve with the
// files), and reaches it with curl and with this project's CLI: trusted
// by the right CA and with credentials it works; with another CA, no CA,
// no or wrong credentials, or a plain http URL, each fails saying why.
func TestTLSAndCredentials(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("/usr/bin/curl is missing (package curl); run scripts/install-test-deps.sh")
		}
		t.Skip("/usr/bin/curl is missing: install Debian's curl (scripts/install-test-deps.sh)")
	}
	clearOSEnv(t)
	pki, other := filepath.Join(t.TempDir(), "pki"), filepath.Join(t.TempDir(), "other")
	for _, d := range []string{pki, other} {
		if code, _, stderr := runCLI("certs", "--dir", d); code != 0 {
			t.Fatalf("certs --dir %s: %s", d, stderr)
		}
	}
	caFile, otherCA := filepath.Join(pki, "ca.pem"), filepath.Join(other, "ca.pem")
	const user, password = "operator", "tls-test-password"
	htpasswd := testrig.HTPasswd(t, map[string]string{user: password})
	url, logs := serveProcess(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--api-listen", "127.0.0.1:0",
		"--mqtt-listen", testrig.FreeAddr(t), "--auth", "http_basic", "--htpasswd", htpasswd,
		"--tls-cert", filepath.Join(pki, "server.pem"), "--tls-key", filepath.Join(pki, "server-key.pem"))
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("serve logged the API as %q, want https://127.0.0.1:PORT", url)
	}

	// curl: the right CA and credentials; the right CA without them; a
	// CA that did not sign the server's certificate; the system's CAs.
	if code, out, stderr := curl(t, "--cacert", caFile, "-u", user+":"+password, "-w", "\n%{http_code}", url+"/v1/nodes"); code != 0 ||
		!strings.HasSuffix(out, "\n200") || !strings.Contains(out, `"nodes"`) {
		t.Fatalf("curl --cacert ca.pem with credentials: exit %d, %q, %s", code, out, stderr)
	}
	if code, out, _ := curl(t, "--cacert", caFile, "-o", "/dev/null", "-w", "%{http_code}", url+"/v1/nodes"); code != 0 || out != "401" {
		t.Fatalf("curl --cacert ca.pem without credentials: exit %d, HTTP %s; want 401", code, out)
	}
	if code, out, _ := curl(t, "--cacert", caFile, "-o", "/dev/null", "-w", "%{http_code}", url+"/v1"); code != 0 || out != "200" {
		t.Fatalf("curl --cacert ca.pem /v1 without credentials: exit %d, HTTP %s; want 200 (version documents are public)", code, out)
	}
	for _, args := range [][]string{{"--cacert", otherCA}, {}} {
		code, _, stderr := curl(t, append(args, "-u", user+":"+password, url+"/v1/nodes")...)
		if code != 60 || !strings.Contains(stderr, "certificate") {
			t.Errorf("curl %v: exit %d, stderr %q; want 60 (peer certificate cannot be authenticated)", args, code, stderr)
		}
	}

	// This project's CLI, with flags and with the variables.
	site := filepath.Join(t.TempDir(), "site1.json")
	if code, _, stderr := runCLI("--url", url, "--os-cacert", caFile, "--os-username", user, "--os-password", password,
		"site", "add", "site1", "--credentials-file", site); code != 0 {
		t.Fatalf("site add over https: %s", stderr)
	}
	t.Setenv("OS_USERNAME", user)
	t.Setenv("OS_PASSWORD", password)
	t.Setenv("OS_CACERT", caFile)
	if code, _, stderr := runCLI("--url", url, "node", "create", "--driver", "fake", "--name", "tls1"); code != 0 {
		t.Fatalf("node create with OS_USERNAME, OS_PASSWORD, OS_CACERT: %s", stderr)
	}
	if code, out, stderr := runCLI("--url", url, "node", "list", "-f", "json"); code != 0 || !strings.Contains(out, `"tls1"`) {
		t.Fatalf("node list: exit %d, %s %s", code, out, stderr)
	}
	for _, c := range []struct {
		what string
		env  map[string]string
		args []string
		want []string
	}{
		{"no CA", map[string]string{"OS_CACERT": ""}, nil, []string{"does not trust", "--os-cacert FILE or OS_CACERT", "ca.pem"}},
		{"another CA", nil, []string{"--os-cacert", otherCA}, []string{"did not sign", otherCA}},
		{"missing CA file", nil, []string{"--os-cacert", filepath.Join(pki, "nosuch.pem")}, []string{"cannot read the CA file", "nosuch.pem"}},
		{"a key as CA", nil, []string{"--os-cacert", filepath.Join(pki, "ca-key.pem")}, []string{"holds no PEM certificate"}},
		{"no credentials", map[string]string{"OS_USERNAME": "", "OS_PASSWORD": ""}, nil, []string{"HTTP 401", "set OS_USERNAME and OS_PASSWORD"}},
		{"wrong password", nil, []string{"--os-password", "nope"}, []string{"HTTP 401", `refused user "operator"`}},
		{"plain http", nil, []string{"--url", strings.Replace(url, "https://", "http://", 1)}, []string{"serves https: use --url " + url}},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, _, stderr := runCLI(append([]string{"--url", url}, append(c.args, "node", "list")...)...)
		if code != 1 {
			t.Errorf("%s: node list exit %d, want 1; stderr %q", c.what, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", c.what, stderr, w)
			}
		}
		if strings.Contains(stderr, password) {
			t.Errorf("%s: the password is printed: %q", c.what, stderr)
		}
		t.Setenv("OS_CACERT", caFile)
		t.Setenv("OS_USERNAME", user)
		t.Setenv("OS_PASSWORD", password)
	}
	l := logs.String()
	if !strings.Contains(l, "api=https://127.0.0.1:") || !strings.Contains(l, "auth=http_basic") {
		t.Errorf("the serve log does not say https and http_basic:\n%s", l)
	}
	if !strings.Contains(l, "API authentication failed") {
		t.Errorf("the refused login is not logged:\n%s", l)
	}
	if strings.Contains(l, password) || strings.Contains(l, "nope") {
		t.Errorf("the serve log shows a password:\n%s", l)
	}
}
