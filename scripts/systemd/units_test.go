// Package systemd holds the systemd units that run the coordinator and the edge agents
// on a server (docs/operations.md), and the tests that check them: systemd-analyze
// verify in a scratch root, the hardening lines, and the ExecStart flags against the
// real binaries.
package systemd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

const (
	coordinatorUnit = "bmedge-coordinator.service"
	agentUnit       = "bmedge-agent@.service"
	sysusersFile    = "bmedge.sysusers.conf"
)

// requireTool skips the test when a program is missing, unless BM_REQUIRE_ALL=1.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found (Debian package %s; scripts/install-test-deps.sh installs it)", name, pkg)
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatal(msg + "; BM_REQUIRE_ALL=1 requires it")
	}
	t.Skip(msg)
	return ""
}

// unit is a parsed unit file: each key's values in order, continuation lines joined.
type unit map[string][]string

func parseUnit(text string) unit {
	u := unit{}
	section := ""
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if cur != "" {
			cur += " " + strings.TrimSpace(strings.TrimSuffix(l, "\\"))
			if !strings.HasSuffix(l, "\\") {
				lines = append(lines, cur)
				cur = ""
			}
			continue
		}
		s := strings.TrimSpace(l)
		if strings.HasSuffix(s, "\\") {
			cur = strings.TrimSpace(strings.TrimSuffix(s, "\\"))
			continue
		}
		lines = append(lines, s)
	}
	for _, s := range lines {
		if s == "" || s[0] == '#' || s[0] == ';' {
			continue
		}
		if s[0] == '[' {
			section = strings.Trim(s, "[]")
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			continue
		}
		k = section + "." + strings.TrimSpace(k)
		u[k] = append(u[k], strings.TrimSpace(v))
	}
	return u
}

func (u unit) last(k string) (string, bool) {
	v := u[k]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

func readUnit(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Listener defaults of each binary (their --help), and --fd-reserve: LimitNOFILE must
// leave the listeners their whole budget.
const (
	fdReserve       = 256
	coordinatorFDs  = 1024 + 16384 + fdReserve                    // API, embedded broker
	agentFDs        = 16384 + 1024 + 1024 + 1024 + 64 + fdReserve // site broker, media, image cache, netboot HTTP, metrics
	forbiddenSecret = "PASSWORD"
)

// hardeningProblems lists what is missing or wrong in a unit's hardening; caps is the
// exact capability set it may keep.
func hardeningProblems(text string, caps []string, minNOFILE int) []string {
	u := parseUnit(text)
	var p []string
	want := map[string]string{
		"Service.User":                     "bmedge",
		"Service.Group":                    "bmedge",
		"Service.Restart":                  "on-failure",
		"Service.RestartPreventExitStatus": "2",
		"Service.NoNewPrivileges":          "yes",
		"Service.ProtectSystem":            "strict",
		"Service.ProtectHome":              "yes",
		"Service.PrivateTmp":               "yes",
		"Service.PrivateDevices":           "yes",
		"Service.StateDirectoryMode":       "0700",
		"Service.UMask":                    "0077",
		"Service.RestrictSUIDSGID":         "yes",
		"Service.SystemCallArchitectures":  "native",
	}
	for k, v := range want {
		got, ok := u.last(k)
		if !ok {
			p = append(p, fmt.Sprintf("%s= is missing (want %s)", k, v))
		} else if got != v {
			p = append(p, fmt.Sprintf("%s=%s, want %s", k, got, v))
		}
	}
	if sd, ok := u.last("Service.StateDirectory"); !ok || !strings.HasPrefix(sd, "bmedge/") {
		p = append(p, "Service.StateDirectory= is missing or not under bmedge/")
	}
	if n, ok := u.last("Service.LimitNOFILE"); !ok {
		p = append(p, "Service.LimitNOFILE= is missing")
	} else if v, err := strconv.Atoi(n); err != nil || v < minNOFILE {
		p = append(p, fmt.Sprintf("Service.LimitNOFILE=%s, want at least %d (the listeners' defaults plus --fd-reserve)", n, minNOFILE))
	}
	for _, k := range []string{"Service.CapabilityBoundingSet", "Service.AmbientCapabilities"} {
		got, ok := u.last(k)
		if !ok {
			p = append(p, k+"= is missing")
			continue
		}
		if strings.Join(strings.Fields(got), " ") != strings.Join(caps, " ") {
			p = append(p, fmt.Sprintf("%s=%s, want exactly %q", k, got, strings.Join(caps, " ")))
		}
	}
	if f, ok := u.last("Service.SystemCallFilter"); !ok || len(u["Service.SystemCallFilter"]) < 2 || !strings.HasPrefix(f, "~") {
		p = append(p, "Service.SystemCallFilter= must allow @system-service and then deny (~) more")
	}
	if _, ok := u.last("Service.RestrictAddressFamilies"); !ok {
		p = append(p, "Service.RestrictAddressFamilies= is missing")
	}
	// Secrets never in the unit: an optional EnvironmentFile under /etc/bmedge, and
	// credentials by LoadCredential=.
	if ef, ok := u.last("Service.EnvironmentFile"); !ok || !strings.HasPrefix(ef, "-/etc/bmedge/") {
		p = append(p, "Service.EnvironmentFile= must be an optional (-) file under /etc/bmedge/")
	}
	// Every file ExecStart reads from the credentials folder (%d) is handed over by a
	// LoadCredential= line.
	execLine, _ := u.last("Service.ExecStart")
	loaded := map[string]bool{}
	for _, l := range u["Service.LoadCredential"] {
		name, _, _ := strings.Cut(l, ":")
		loaded[name] = true
	}
	used := regexp.MustCompile(`%d/(\S+)`).FindAllStringSubmatch(execLine, -1)
	if len(used) == 0 {
		p = append(p, "Service.ExecStart= reads no file from %d (secret files are handed over with LoadCredential=)")
	}
	for _, m := range used {
		if !loaded[m[1]] {
			p = append(p, fmt.Sprintf("Service.ExecStart= reads %%d/%s but no LoadCredential=%s:FILE hands it over", m[1], m[1]))
		}
	}
	for k, vs := range u {
		for _, v := range vs {
			if strings.Contains(strings.ToUpper(v), forbiddenSecret) || (k == "Service.Environment") {
				p = append(p, fmt.Sprintf("%s=%s: no secret or environment in the unit (EnvironmentFile= only)", k, v))
			}
		}
	}
	return p
}

// TestUnitsHardening checks the hardening lines of both units, and that removing any
// one of them is caught.
func TestUnitsHardening(t *testing.T) {
	cases := []struct {
		name  string
		caps  []string
		nofd  int
		lines []string // each a required line that, removed, must be reported
	}{
		{coordinatorUnit, nil, coordinatorFDs, nil},
		{agentUnit, []string{"CAP_NET_BIND_SERVICE", "CAP_NET_RAW"}, agentFDs, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := readUnit(t, c.name)
			if p := hardeningProblems(text, c.caps, c.nofd); len(p) > 0 {
				t.Fatalf("%s:\n  %s", c.name, strings.Join(p, "\n  "))
			}
			// Each hardening line removed must be reported.
			re := regexp.MustCompile(`^(User|Group|Restart|RestartPreventExitStatus|NoNewPrivileges|ProtectSystem|ProtectHome|PrivateTmp|PrivateDevices|StateDirectory|StateDirectoryMode|UMask|LimitNOFILE|CapabilityBoundingSet|AmbientCapabilities|SystemCallFilter|RestrictAddressFamilies|RestrictSUIDSGID|SystemCallArchitectures|EnvironmentFile|LoadCredential)=`)
			lines := strings.Split(text, "\n")
			n := 0
			for i, l := range lines {
				if !re.MatchString(l) {
					continue
				}
				n++
				mutant := strings.Join(append(append([]string{}, lines[:i]...), lines[i+1:]...), "\n")
				if len(hardeningProblems(mutant, c.caps, c.nofd)) == 0 {
					t.Errorf("%s without line %d %q: not reported", c.name, i+1, l)
				}
			}
			if n < 20 {
				t.Fatalf("only %d hardening lines found in %s", n, c.name)
			}
			for _, m := range []struct{ from, to string }{
				{"NoNewPrivileges=yes", "NoNewPrivileges=no"},
				{"ProtectSystem=strict", "ProtectSystem=full"},
				{"LimitNOFILE=65536", "LimitNOFILE=4096"},
				{"RestartPreventExitStatus=2", "RestartPreventExitStatus=3"},
				{"UMask=0077", "UMask=0077\nEnvironment=COORDINATOR_BROKER_PASSWORD=x"},
			} {
				if len(hardeningProblems(strings.Replace(text, m.from, m.to, 1), c.caps, c.nofd)) == 0 {
					t.Errorf("%s with %q instead of %q: not reported", c.name, m.to, m.from)
				}
			}
		})
	}
	if !strings.Contains(readUnit(t, sysusersFile), "\nu bmedge ") {
		t.Errorf("%s does not declare the bmedge user the units run as", sysusersFile)
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the coordinator and the agent under the names the units run.
func binaries(t *testing.T) (coordinator, agent string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "bmedge-units-bin-")
		if buildErr != nil {
			return
		}
		for name, pkg := range map[string]string{"bmedge-coordinator": "./coordinator/cmd/coordinator", "bmedge-agent": "./agent/cmd/agent"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg)
			cmd.Dir = "../.."
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "bmedge-coordinator"), filepath.Join(binDir, "bmedge-agent")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// execStart returns the ExecStart words of a unit file.
func execStart(t *testing.T, name string) []string {
	t.Helper()
	v, ok := parseUnit(readUnit(t, name)).last("Service.ExecStart")
	if !ok {
		t.Fatalf("%s has no ExecStart=", name)
	}
	return strings.Fields(v)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// scratchRoot installs the units, the binaries at their ExecStart paths and the host's
// own system units (for the targets they name) into a new folder.
func scratchRoot(t *testing.T) string {
	t.Helper()
	coordinator, agent := binaries(t)
	root := t.TempDir()
	var hostUnits string
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "multi-user.target")); err == nil {
			hostUnits = d
			break
		}
	}
	if hostUnits == "" {
		t.Fatal("no systemd system units (multi-user.target) under /usr/lib/systemd/system: is Debian's systemd package installed?")
	}
	ents, err := os.ReadDir(hostUnits)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(hostUnits, e.Name()), filepath.Join(dst, e.Name()), 0o644)
		}
	}
	for _, u := range []string{coordinatorUnit, agentUnit} {
		copyFile(t, u, filepath.Join(root, "etc/systemd/system", u), 0o644)
	}
	copyFile(t, sysusersFile, filepath.Join(root, "usr/lib/sysusers.d/bmedge.conf"), 0o644)
	copyFile(t, coordinator, filepath.Join(root, execStart(t, coordinatorUnit)[0]), 0o755)
	copyFile(t, agent, filepath.Join(root, execStart(t, agentUnit)[0]), 0o755)
	return root
}

func analyze(t *testing.T, root string, args ...string) (string, error) {
	cmd := exec.Command("systemd-analyze", append(args, "--root="+root)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUnitsVerify installs the units into a scratch root and checks them with
// systemd-analyze verify (any warning fails: an unknown key or a bad value is only a
// warning to systemd) and systemd-analyze security --offline.
func TestUnitsVerify(t *testing.T) {
	requireTool(t, "systemd-analyze", "systemd")
	root := scratchRoot(t)
	units := []string{"bmedge-coordinator.service", "bmedge-agent@site1.service"}
	for _, u := range units {
		out, err := analyze(t, root, "verify", u)
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
		// Exposure 0..100 (systemd prints it /10); the units score about 1.5 and 1.9.
		out, err = analyze(t, root, "security", "--offline=true", "--threshold=25", u)
		if err != nil {
			t.Errorf("systemd-analyze security %s above 2.5 (or failed): %v\n%s", u, err, out)
		}
	}

	// The check itself can fail: a misspelled key, and a missing binary.
	p := filepath.Join(root, "etc/systemd/system", coordinatorUnit)
	good := readUnit(t, p)
	if err := os.WriteFile(p, []byte(strings.Replace(good, "ProtectSystem=", "ProtectSytem=", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := analyze(t, root, "verify", units[0]); err == nil && strings.TrimSpace(out) == "" {
		t.Error("systemd-analyze verify accepts a misspelled ProtectSystem= silently: this test cannot see it")
	}
	if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, execStart(t, agentUnit)[0])); err != nil {
		t.Fatal(err)
	}
	if out, err := analyze(t, root, "verify", units[1]); err == nil {
		t.Errorf("systemd-analyze verify accepts a unit whose binary is missing:\n%s", out)
	}
}

// flagsOf returns the --flags of ExecStart words.
func flagsOf(words []string) []string {
	var f []string
	for _, w := range words {
		if strings.HasPrefix(w, "--") {
			f = append(f, strings.SplitN(w, "=", 2)[0])
		}
	}
	return f
}

// TestUnitsFlagsExist checks that every flag of each ExecStart is in the --help of the
// binary it runs.
func TestUnitsFlagsExist(t *testing.T) {
	coordinator, agent := binaries(t)
	for _, c := range []struct {
		unit string
		help []string
		bin  string
	}{
		{coordinatorUnit, []string{"serve", "--help"}, coordinator},
		{agentUnit, []string{"--help"}, agent},
	} {
		words := execStart(t, c.unit)
		if c.unit == coordinatorUnit && (len(words) < 2 || words[1] != "serve") {
			t.Fatalf("%s: ExecStart does not run `serve`: %q", c.unit, words)
		}
		out, _ := exec.Command(c.bin, c.help...).CombinedOutput()
		flags := flagsOf(words)
		if len(flags) < 2 {
			t.Fatalf("%s: too few flags in ExecStart: %q", c.unit, words)
		}
		for _, f := range flags {
			name := strings.TrimPrefix(f, "--")
			// cobra prints "--name", Go's flag package "-name".
			if !regexp.MustCompile(`(?m)^\s+(-\w, )?--?` + regexp.QuoteMeta(name) + `\b`).Match(out) {
				t.Errorf("%s: ExecStart flag %s is not in `%s %s`", c.unit, f, filepath.Base(c.bin), strings.Join(c.help, " "))
			}
		}
	}
}

// substitute turns a unit's ExecStart into a command that runs in a test folder: %d
// (the credentials folder), %i (the instance) and the /etc/bmedge and /var/lib/bmedge
// paths are mapped into dir, listeners onto loopback port 0, $VARS dropped.
func substitute(words []string, dir, instance string) []string {
	var out []string
	for _, w := range words[1:] {
		if strings.HasPrefix(w, "$") {
			continue
		}
		w = strings.ReplaceAll(w, "%d", filepath.Join(dir, "credentials"))
		w = strings.ReplaceAll(w, "%i", instance)
		w = strings.ReplaceAll(w, "/etc/bmedge", filepath.Join(dir, "etc"))
		w = strings.ReplaceAll(w, "/var/lib/bmedge", filepath.Join(dir, "state"))
		w = regexp.MustCompile(`^0\.0\.0\.0:\d+$`).ReplaceAllString(w, "127.0.0.5:0")
		out = append(out, w)
	}
	return out
}

// startUntil starts cmd and waits until a line of its output matches re; it returns
// that line's match. The process is stopped by SIGTERM at cleanup (SIGKILL after 10 s).
func startUntil(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp, what string) ([]string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); exited <- err; close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan []string, 1)
	var log bytes.Buffer
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		sent := false
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case m, ok := <-found:
		if ok {
			return m, exited
		}
	case <-time.After(60 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("%s never logged %s:\n%s", what, re, log.String())
	return nil, nil
}

// TestUnitsExecStartRuns runs the coordinator with its unit's ExecStart flags (paths in
// a test folder, listeners on loopback) until it serves https with http_basic, adds a
// site through its API, then runs the agent with its unit's flags and that site's
// credentials until it is connected; both stop on SIGTERM with status 0.
func TestUnitsExecStartRuns(t *testing.T) {
	coordinator, agent := binaries(t)
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(dir, "etc", "pki")
	if out, err := exec.Command(coordinator, "certs", "--dir", pki, "--host", "127.0.0.5").CombinedOutput(); err != nil {
		t.Fatalf("coordinator certs: %v\n%s", err, out)
	}
	// LoadCredential= copies: htpasswd and the key into the credentials folder.
	hash, err := bcrypt.GenerateFromPassword([]byte("units-test-pw"), 12)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "htpasswd"), []byte("operator:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(pki, "server-key.pem"), filepath.Join(creds, "server-key.pem"), 0o600)

	args := substitute(execStart(t, coordinatorUnit), dir, "site1")
	cmd := exec.Command(coordinator, args...)
	cmd.Env = append(os.Environ(), "COORDINATOR_BROKER_PASSWORD=")
	m, cexit := startUntil(t, cmd, regexp.MustCompile(`coordinator serving" api=(https://\S+) auth=http_basic broker=(mqtts://\S+)`), "coordinator serve "+strings.Join(args, " "))
	api := m[1]

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	site := filepath.Join(dir, "etc", "sites", "site1.json")
	if err := os.MkdirAll(filepath.Dir(site), 0o700); err != nil {
		t.Fatal(err)
	}
	add := exec.CommandContext(ctx, coordinator, "--url", api, "--os-cacert", filepath.Join(pki, "ca.pem"), "site", "add", "site1", "--credentials-file", site)
	add.Env = append(os.Environ(), "OS_USERNAME=operator", "OS_PASSWORD=units-test-pw")
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("site add: %v\n%s", err, out)
	}
	copyFile(t, site, filepath.Join(creds, "site.json"), 0o600)

	aargs := append(substitute(execStart(t, agentUnit), dir, "site1"), "--ca-file", filepath.Join(pki, "ca.pem"))
	acmd := exec.Command(agent, aargs...)
	_, aexit := startUntil(t, acmd, regexp.MustCompile(`edge agent connected`), "agent "+strings.Join(aargs, " "))
	if _, err := os.Stat(filepath.Join(dir, "state", "agent-site1", "outbox.key")); err != nil {
		t.Errorf("the agent's --state-dir from the unit holds no outbox.key: %v", err)
	}

	for _, c := range []struct {
		cmd    *exec.Cmd
		exited <-chan error
	}{{acmd, aexit}, {cmd, cexit}} {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-c.exited:
			if err != nil {
				t.Errorf("%s after SIGTERM: %v, want status 0 (the unit restarts on anything else)", filepath.Base(c.cmd.Path), err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop within 30 s of SIGTERM", filepath.Base(c.cmd.Path))
		}
	}
}
