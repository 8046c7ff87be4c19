package cli_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// apiCall is a request to the API with Go's client (an independent
// client of the CLI's): status and body.
func apiCall(t *testing.T, base, user, password, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type listedNode struct {
	UUID       string         `json:"uuid"`
	Name       string         `json:"name"`
	Driver     string         `json:"driver"`
	DriverInfo map[string]any `json:"driver_info"`
	Extra      map[string]any `json:"extra"`
}

func listNodes(t *testing.T, base, user, password string) map[string]listedNode {
	t.Helper()
	code, b := apiCall(t, base, user, password, "GET", "/v1/nodes/detail?limit=1000", nil)
	var l struct {
		Nodes []listedNode `json:"nodes"`
	}
	if code != 200 || json.Unmarshal(b, &l) != nil {
		t.Fatalf("GET /v1/nodes/detail: HTTP %d %.300s", code, b)
	}
	out := map[string]listedNode{}
	for _, n := range l.Nodes {
		out[n.UUID] = n
	}
	return out
}

// TestBackupRestoreWhileNodesChange takes backups of a running
// coordinator (real Badger on disk, --auth http_basic) while its nodes
// keep changing (extra patched, maintenance set and unset, manage,
// nodes created): one read slowly, during which a second
// backup is refused (409) and one without credentials is 401, and one
// with 'coordinator backup'. Each is restored offline into a new data
// folder: every node that existed when the backup started is there,
// with its fields and its BMC password; two nodes patched one after
// the other show one moment (the one patched first is never behind);
// a coordinator started on the restored folder serves every node and
// the site. No BMC password is in a backup file in the clear. A
// truncated backup, one with a byte flipped, the wrong key file and a
// folder that is not empty are refused, and leave nothing behind.
func TestBackupRestoreWhileNodesChange(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("/usr/bin/curl is missing (package curl); run scripts/install-test-deps.sh")
		}
		t.Skip("/usr/bin/curl is missing: install Debian's curl (scripts/install-test-deps.sh)")
	}
	clearOSEnv(t)
	const user, password = "operator", "backup-test-password"
	htpasswd := testrig.HTPasswd(t, map[string]string{user: password})
	root := t.TempDir()
	data := filepath.Join(root, "data")
	base, logs := serveProcess(t, "--data-dir", data, "--api-listen", "127.0.0.1:0", "--mqtt-listen", testrig.FreeAddr(t),
		"--auth", "http_basic", "--htpasswd", htpasswd)
	t.Setenv("OS_USERNAME", user)
	t.Setenv("OS_PASSWORD", password)
	if code, _, stderr := runCLI("--url", base, "site", "add", "site1", "--credentials-file", filepath.Join(root, "site1.json")); code != 0 {
		t.Fatalf("site add: %s", stderr)
	}

	// 48 nodes, each with a BMC password of its own and ~90 KB in
	// extra, properties and instance_info: ~9 MB in all, more than the
	// sockets buffer, so that a backup read slowly keeps the
	// coordinator reading its database for a while.
	secretOf := map[string]string{}
	pad := func() string { b := make([]byte, 15<<10); _, _ = rand.Read(b); return hex.EncodeToString(b) }
	for i := range 48 {
		name := fmt.Sprintf("bk%02d", i)
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		pw := "bmc-pw-" + hex.EncodeToString(b)
		code, body := apiCall(t, base, user, password, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "ipmi",
			"driver_info": map[string]any{"ipmi_address": fmt.Sprintf("10.9.0.%d", i), "ipmi_username": "admin", "ipmi_password": pw},
			"extra":       map[string]any{"pad": pad()}, "properties": map[string]any{"pad": pad()}, "instance_info": map[string]any{"pad": pad()}})
		if code != 201 {
			t.Fatalf("create %s: HTTP %d %.300s", name, code, body)
		}
		secretOf[name] = pw
	}
	// The chain: the nodes whose keys sort first and last, patched in
	// that order with the same number, without their padding.
	before := listNodes(t, base, user, password)
	uuids := make([]string, 0, len(before))
	for u := range before {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	first, last := uuids[0], uuids[len(uuids)-1]
	for _, u := range []string{first, last} {
		if code, body := apiCall(t, base, user, password, "PATCH", "/v1/nodes/"+u, []map[string]any{{"op": "remove", "path": "/extra/pad"},
			{"op": "remove", "path": "/properties/pad"}, {"op": "remove", "path": "/instance_info/pad"}}); code != 200 {
			t.Fatalf("PATCH %s: HTTP %d %.300s", u, code, body)
		}
	}

	// The changer: until stopped, patch the chain, set and unset
	// maintenance, manage nodes, create nodes. done counts the changes
	// made; when each ended is kept.
	var seq atomic.Int64
	var mu sync.Mutex
	var ends []time.Time
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ok := func(code int, body []byte, what string) {
			if code >= 300 {
				t.Errorf("changer: %s: HTTP %d %.300s", what, code, body)
			}
			mu.Lock()
			ends = append(ends, time.Now())
			mu.Unlock()
		}
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, u := range []string{first, last} {
				code, body := apiCall(t, base, user, password, "PATCH", "/v1/nodes/"+u, []map[string]any{{"op": "add", "path": "/extra/seq", "value": i}})
				ok(code, body, "patch extra/seq")
			}
			seq.Store(int64(i))
			u := uuids[1+i%(len(uuids)-2)]
			switch i % 4 {
			case 0:
				code, body := apiCall(t, base, user, password, "PUT", "/v1/nodes/"+u+"/maintenance", map[string]any{"reason": fmt.Sprintf("backup test %d", i)})
				ok(code, body, "maintenance on")
			case 1:
				code, body := apiCall(t, base, user, password, "DELETE", "/v1/nodes/"+u+"/maintenance", nil)
				ok(code, body, "maintenance off")
			case 2:
				code, body := apiCall(t, base, user, password, "PUT", "/v1/nodes/"+u+"/states/provision", map[string]any{"target": "manage"})
				if code != 202 && code != 400 && code != 409 { // manage is refused once the node is past enroll
					t.Errorf("changer: manage: HTTP %d %.300s", code, body)
				}
			case 3:
				code, body := apiCall(t, base, user, password, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("late%04d", i), "driver": "fake"})
				ok(code, body, "create")
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopChanger := sync.OnceFunc(func() { close(stop); <-stopped })
	t.Cleanup(stopChanger)
	for seq.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}

	// A slow backup: a client with a small receive buffer that reads
	// 32 KiB every 10 ms. The nodes listed before it starts are all in
	// it.
	atStart := listNodes(t, base, user, password)
	slow := filepath.Join(root, "slow.backup")
	slowFile, err := os.OpenFile(slow, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	slowClient := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	req, _ := http.NewRequest("POST", base+"/v1/backup", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(user, password)
	resp, err := slowClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("slow backup: %v %v", err, resp)
	}
	slowDone := make(chan struct{})
	firstBytes := make(chan time.Time, 1) // when the reader had the first bytes
	var slowErr error
	go func() {
		defer close(slowDone)
		defer slowFile.Close()
		defer resp.Body.Close()
		buf := make([]byte, 32<<10)
		paused := false
		for {
			n, err := resp.Body.Read(buf)
			if _, werr := slowFile.Write(buf[:n]); werr != nil {
				slowErr = werr
				return
			}
			if n > 0 && !paused {
				// After the first bytes, the reader waits for a change
				// to end (at most 20 s, within the coordinator's 30 s
				// stall bound), so that the backup is being sent while
				// nodes change however slow the machine is.
				paused = true
				from := time.Now()
				firstBytes <- from
				for waited := time.Duration(0); waited < 20*time.Second; waited += 5 * time.Millisecond {
					mu.Lock()
					ended := len(ends) > 0 && ends[len(ends)-1].After(from)
					mu.Unlock()
					if ended {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			if err == io.EOF {
				if resp.Trailer.Get("Bmedge-Backup-Nodes") == "" {
					slowErr = fmt.Errorf("the slow backup ended without its trailer (error trailer %q)", resp.Trailer.Get("Bmedge-Backup-Error"))
				}
				return
			}
			if err != nil {
				slowErr = err
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		resp.Body.Close()
		<-slowDone
	})
	var firstByte time.Time
	select {
	case firstByte = <-firstBytes:
	case <-slowDone:
		t.Fatalf("the slow backup ended before its first bytes: %v", slowErr)
	}
	// Meanwhile: a second backup is refused, and one without
	// credentials is 401 (curl, and the CLI).
	if code, _, stderr := runCLI("--url", base, "backup", "--out", filepath.Join(root, "second.backup")); code != 1 ||
		!strings.Contains(stderr, "HTTP 409") || !strings.Contains(stderr, "already running") {
		t.Errorf("a backup during another: exit %d, %q; want 1 and HTTP 409, already running", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "second.backup")); err == nil {
		t.Error("the refused backup left its file")
	}
	if code, out, _ := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Content-Type: application/json", "-d", "{}", base+"/v1/backup"); code != 0 || out != "401" {
		t.Errorf("POST /v1/backup without credentials: curl exit %d, HTTP %s; want 401", code, out)
	}
	t.Setenv("OS_PASSWORD", "")
	t.Setenv("OS_USERNAME", "")
	if code, _, stderr := runCLI("--url", base, "backup", "--out", filepath.Join(root, "anon.backup")); code != 1 || !strings.Contains(stderr, "HTTP 401") {
		t.Errorf("coordinator backup without credentials: exit %d, %q; want 1 and HTTP 401", code, stderr)
	}
	t.Setenv("OS_USERNAME", user)
	t.Setenv("OS_PASSWORD", password)
	var sentSeen time.Time
	for sentSeen.IsZero() {
		select {
		case <-slowDone:
			if !strings.Contains(logs.String(), `msg="backup sent"`) {
				t.Fatalf("the slow backup ended (%v) before the coordinator said 'backup sent':\n%s", slowErr, logs.String())
			}
			sentSeen = time.Now()
		case <-time.After(5 * time.Millisecond):
			if strings.Contains(logs.String(), `msg="backup sent"`) {
				sentSeen = time.Now()
			}
		}
	}
	<-slowDone
	if slowErr != nil {
		t.Fatalf("slow backup: %v", slowErr)
	}
	mu.Lock()
	during := 0
	for _, e := range ends {
		if e.After(firstByte) && e.Before(sentSeen) {
			during++
		}
	}
	mu.Unlock()
	t.Logf("%d changes ended while the coordinator was sending the slow backup", during)
	if during == 0 {
		t.Errorf("no change ended while the slow backup was sent: the test did not change nodes during a backup")
	}

	// The CLI's backup, nodes still changing.
	atCLI := listNodes(t, base, user, password)
	cliFile := filepath.Join(root, "cli.backup")
	code, out, stderr := runCLI("--url", base, "backup", "--out", cliFile)
	if code != 0 || !strings.Contains(out, "written to "+cliFile) {
		t.Fatalf("coordinator backup: exit %d, %q %q", code, out, stderr)
	}
	stopChanger()
	if fi, err := os.Stat(cliFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", cliFile, fi, err)
	}
	if code, _, stderr := runCLI("--url", base, "backup", "--out", cliFile); code != 1 || !strings.Contains(stderr, "exists") {
		t.Errorf("backup onto an existing file: exit %d, %q; want 1, exists", code, stderr)
	}

	// No secret in the clear in either file.
	for _, f := range []string{slow, cliFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, pw := range secretOf {
			if bytes.Contains(b, []byte(pw)) {
				t.Errorf("%s holds %s's BMC password in the clear", f, name)
			}
		}
		if bytes.Contains(b, []byte("ipmi_address")) || bytes.Contains(b, []byte("bk01")) {
			t.Errorf("%s holds node records in the clear", f)
		}
	}

	// Refusals, each leaving nothing behind.
	keyFile := filepath.Join(data, "db.key")
	good, _ := os.ReadFile(slow)
	truncated, flipped := filepath.Join(root, "truncated.backup"), filepath.Join(root, "flipped.backup")
	_ = os.WriteFile(truncated, good[:len(good)/2], 0o600)
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x20
	_ = os.WriteFile(flipped, bad, 0o600)
	wrongKey := filepath.Join(root, "wrong.key")
	wk := make([]byte, 32)
	_, _ = rand.Read(wk)
	_ = os.WriteFile(wrongKey, wk, 0o600)
	openKey := filepath.Join(root, "open.key")
	_ = os.WriteFile(openKey, wk, 0o644)
	notEmpty := filepath.Join(root, "full")
	_ = os.MkdirAll(notEmpty, 0o700)
	_ = os.WriteFile(filepath.Join(notEmpty, "x"), nil, 0o600)
	target := filepath.Join(root, "target")
	for _, c := range []struct {
		what, from, dir, key string
		want                 []string
	}{
		{"truncated", truncated, target, keyFile, []string{"truncated", "nothing was written"}},
		{"flipped byte", flipped, target, keyFile, []string{"damaged or was changed", "nothing was written"}},
		{"wrong key", slow, target, wrongKey, []string{"does not open this backup", "db.key"}},
		{"key open to others", slow, target, openKey, []string{"chmod 600"}},
		{"not a backup", keyFile, target, keyFile, []string{"not a coordinator backup"}},
		{"folder not empty", slow, notEmpty, keyFile, []string{"refusing to restore into", "holds x"}},
		{"running coordinator's folder", slow, data, keyFile, []string{"refusing to restore into", "coordinator's database"}},
	} {
		code, _, stderr := runCLI("restore", "--from", c.from, "--data-dir", c.dir, "--key-file", c.key)
		if code != 1 {
			t.Errorf("restore (%s): exit %d, want 1; stderr %q", c.what, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("restore (%s): stderr %q does not say %q", c.what, stderr, w)
			}
		}
		if _, err := os.Stat(target); err == nil {
			t.Errorf("restore (%s) refused, but made %s", c.what, target)
		}
		if ents, _ := filepath.Glob(filepath.Join(root, ".*restoring*")); len(ents) > 0 {
			t.Errorf("restore (%s) left %v", c.what, ents)
		}
	}
	if ents, _ := os.ReadDir(notEmpty); len(ents) != 1 {
		t.Errorf("a refused restore changed the folder that was not empty: %v", ents)
	}
	if code, _, stderr := runCLI("restore", "--from", slow, "--data-dir", target); code != 2 || !strings.Contains(stderr, "--key-file FILE") {
		t.Errorf("restore without --key-file: exit %d, %q; want 2 naming --key-file", code, stderr)
	}

	// Restore both; every node listed before each backup started is
	// there, whole, with its password, and the chain shows one moment.
	key, err := store.ReadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file  string
		nodes map[string]listedNode
	}{{slow, atStart}, {cliFile, atCLI}} {
		dir := filepath.Join(root, "restored-"+filepath.Base(c.file))
		if c.file == cliFile {
			// An existing empty folder (a systemd StateDirectory=):
			// restored into, made private; the coordinator started on
			// it below serves every node.
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		code, out, stderr := runCLI("restore", "--from", c.file, "--data-dir", dir, "--key-file", keyFile)
		if code != 0 || !strings.Contains(out, "restored ") {
			t.Fatalf("restore %s: exit %d, %q %q", c.file, code, out, stderr)
		}
		if fi, err := os.Stat(dir); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o700 {
			t.Errorf("restored folder %s: mode %v; want 0700", dir, fi.Mode().Perm())
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 3 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("restored folder holds %v; want db, db.key and secret only", names)
		}
		for _, f := range []string{"db.key", "secret"} {
			a, _ := os.ReadFile(filepath.Join(data, f))
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("restored %s differs from the original (%v)", f, err)
			}
		}
		st, err := store.Open(filepath.Join(dir, "db"), key, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		records := map[string][]byte{}
		err = st.Scan(store.NodePrefix, func(k string, v []byte) error {
			records[strings.TrimPrefix(k, store.NodePrefix)] = v
			return nil
		})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		for u, n := range c.nodes {
			rec, ok := records[u]
			if !ok {
				t.Errorf("%s: node %s (%s), listed before the backup started, is not in the restored database", c.file, n.Name, u)
				continue
			}
			if pw, ok := secretOf[n.Name]; ok && !bytes.Contains(rec, []byte(pw)) {
				t.Errorf("%s: node %s's BMC password is not in its restored record", c.file, n.Name)
			}
			if p, _ := n.Extra["pad"].(string); p != "" && !bytes.Contains(rec, []byte(p)) {
				t.Errorf("%s: node %s's extra is not in its restored record", c.file, n.Name)
			}
		}
		seqOf := func(u string) float64 {
			var r struct {
				Extra map[string]any `json:"extra"`
			}
			_ = json.Unmarshal(records[u], &r)
			s, _ := r.Extra["seq"].(float64)
			return s
		}
		if a, b := seqOf(first), seqOf(last); a < b || a > b+1 || a == 0 {
			t.Errorf("%s: the node patched first has seq %v, the one patched after it %v: not one moment", c.file, a, b)
		} else {
			t.Logf("%s: %d nodes restored, chain at seq %v/%v", c.file, len(records), a, b)
		}
	}

	// A coordinator on the restored folder of the CLI's backup.
	dir := filepath.Join(root, "restored-cli.backup")
	rbase, _ := serveProcess(t, "--data-dir", dir, "--api-listen", "127.0.0.1:0", "--mqtt-listen", testrig.FreeAddr(t))
	got := listNodes(t, rbase, "", "")
	for u, n := range atCLI {
		g, ok := got[u]
		if !ok {
			t.Errorf("the restored coordinator does not know node %s (%s)", n.Name, u)
			continue
		}
		if g.Name != n.Name || g.Driver != n.Driver || fmt.Sprint(g.DriverInfo["ipmi_address"]) != fmt.Sprint(n.DriverInfo["ipmi_address"]) ||
			fmt.Sprint(g.Extra["pad"]) != fmt.Sprint(n.Extra["pad"]) {
			t.Errorf("restored node %s: %s %s %v, was %s %s %v", u, g.Name, g.Driver, g.DriverInfo["ipmi_address"], n.Name, n.Driver, n.DriverInfo["ipmi_address"])
		}
		if _, ok := secretOf[n.Name]; ok && g.DriverInfo["ipmi_password"] != "******" {
			t.Errorf("restored node %s shows ipmi_password %v, want it masked", n.Name, g.DriverInfo["ipmi_password"])
		}
	}
	if code, b := apiCall(t, rbase, "", "", "GET", "/v1/sites", nil); code != 200 || !strings.Contains(string(b), `"site1"`) {
		t.Errorf("the restored coordinator's sites: HTTP %d %.300s", code, b)
	}
	t.Logf("%d nodes before the CLI's backup, %d served by the restored coordinator", len(atCLI), len(got))
}
