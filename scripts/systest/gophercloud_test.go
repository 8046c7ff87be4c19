package systest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// gophercloudModule is the gophercloud release whose baremetal acceptance
// suites run here, the one go.mod requires (Metal3's baremetal-operator
// and Terraform's OpenStack provider are its clients).
const gophercloudModule = "github.com/gophercloud/gophercloud/v2"

// TestGophercloudAcceptanceSuites runs gophercloud's own baremetal
// acceptance suites, from the module as published (unmodified, with their
// build tags and environment), against coordinators started as make run
// starts one (one simulated site of 8 nodes, no conductor_group given by
// the clients): the noauth suite against one without authentication, the
// httpbasic suite against one with http_basic. Every test of both must
// pass (a test the suite skips by itself would be reported as such and
// fail this test: none does with this environment).
func TestGophercloudAcceptanceSuites(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles gophercloud's acceptance suites (~30 s cold); not in -short")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("the go command is needed to build gophercloud's suites: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The module as go.mod pins it; downloaded if the cache lacks it.
	out, err := exec.CommandContext(ctx, goBin, "mod", "download", "-json", gophercloudModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", gophercloudModule, err)
	}
	m := regexp.MustCompile(`"Dir":\s*"([^"]+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("go mod download %s gave no folder: %s", gophercloudModule, out)
	}
	modDir := string(m[1])
	// The module cache is read-only: the test binaries go to a folder of
	// this test's.
	bin := t.TempDir()
	build := exec.CommandContext(ctx, goBin, "test", "-c", "-tags", "acceptance baremetal", "-o", bin+string(filepath.Separator),
		"./internal/acceptance/openstack/baremetal/noauth/", "./internal/acceptance/openstack/baremetal/httpbasic/")
	build.Dir = modDir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building gophercloud's baremetal acceptance suites in %s: %v\n%s", modDir, err, b)
	}

	suites := []struct {
		name  string
		users map[string]string
		tests int // as published in this release
	}{
		{"noauth", nil, 7},
		{"httpbasic", map[string]string{"metal3": "acceptance-password"}, 8},
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			c := testrig.Coordinator(t, testrig.Options{Users: s.users})
			testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 100 * time.Millisecond})
			env := append(os.Environ(), "IRONIC_ENDPOINT="+c.APIURL+"/v1", "OS_BRANCH=master", "OS_USERNAME=metal3")
			if s.users != nil {
				env = append(env, "OS_PASSWORD="+s.users["metal3"])
			}
			run := exec.CommandContext(ctx, filepath.Join(bin, s.name+".test"), "-test.v", "-test.count=1")
			run.Env, run.Dir = env, bin
			var buf bytes.Buffer
			run.Stdout, run.Stderr = &buf, &buf
			err := run.Run()
			pass := regexp.MustCompile(`(?m)^--- PASS: (\S+)`).FindAllStringSubmatch(buf.String(), -1)
			fail := regexp.MustCompile(`(?m)^--- FAIL: (\S+)`).FindAllStringSubmatch(buf.String(), -1)
			skip := regexp.MustCompile(`(?m)^--- SKIP: (\S+)`).FindAllStringSubmatch(buf.String(), -1)
			t.Logf("gophercloud %s suite: %d passed, %d skipped, %d failed", s.name, len(pass), len(skip), len(fail))
			if err != nil || len(fail) > 0 || len(skip) > 0 || len(pass) != s.tests {
				t.Fatalf("gophercloud's %s suite: %d passed, %d skipped, %d failed (want all %d passed); exit %v:\n%s",
					s.name, len(pass), len(skip), len(fail), s.tests, err, lastLines(buf.String(), 80))
			}
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
