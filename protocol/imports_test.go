package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// The programs meet only in protocol/ (and in drivers/, the BMC and step
// library that both the coordinator and the edge agent use). The rule
// TestImportRule enforces, over what `go list -json ./...` reports for
// the module (each package's non-test imports and all their dependencies,
// Deps):
//
//   - A program is coordinator/, agent/ or ramdisk/, with everything
//     under it. Outside its _test.go files, a package of one program
//     depends, directly or through other packages, on no package of
//     another program.
//   - The shared libraries, protocol/ (the wire contract), drivers/ and
//     lib/ (the infrastructure the programs share: the store opener, the
//     MQTT broker and link, budgets, the clock), depend on no package of
//     any program outside their _test.go files.
//   - The contract depends on no infrastructure: no package of
//     protocol/ depends on lib/ outside its _test.go files.
//   - No package of a program or a shared library depends on anything
//     under scripts/ outside its _test.go files.
//   - The rig that wires the programs together for system tests
//     (scripts/systest/testrig: it runs the coordinator and the edge
//     agent) and the system tests themselves (scripts/systest, and the
//     ramdisk's QEMU tests in scripts/systest/ramdisk) live outside the
//     programs, in scripts/systest. A package named testrig,
//     wherever it is, may be imported only by _test.go files and other
//     testrig packages: not by a program, a shared library or a tool
//     under scripts/ (a command there that needs a coordinator uses
//     scripts/internal/loadrig). A testrig inside a program would be
//     held to that program's rules like any of its packages: the rig
//     belongs in scripts/systest.
//   - _test.go files (TestImports, XTestImports) may import anything:
//     the tests of coordinator/api, coordinator/cli and coordinator/ui
//     start sites through scripts/systest/testrig. scripts/
//     (benchmarks, labs, tools, system tests) is not a program and may
//     import any program.
//
// Inside a program, arrows run down only (partViolations):
//
//   - No package depends on a package of its own program that holds it
//     (an ancestor folder): agent/relay never imports agent, which
//     wires the parts. An upward arrow is what ties a part back to the
//     type it was cut from. A command (package main: agent/cmd/agent, a
//     generator) stands on top of what it runs and is exempt.
//   - The folders right under a program (its parts: agent/outbox,
//     agent/bmc...) do not depend on each other in a circle, counting
//     every package under each folder: a part reaches another only
//     through what the wiring hands it.
//
// Only the packages that build for the machine running the test are
// checked (go list's build context), as the binaries built there are.

// programs are the module's top-level folders that are programs.
var programs = []string{"coordinator", "agent", "ramdisk"}

// shared are the libraries the programs may all import.
var shared = []string{"protocol", "drivers", "lib"}

// systest is the folder of the system tests and their rig (testrig),
// outside every program; the rule must see its packages.
const systest = "scripts/systest"

// listedPackage is what the rule needs of `go list -json` output.
type listedPackage struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// top is the module's top-level folder holding path, or "" when path is
// outside the module.
func top(module, path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}

func isProgram(dir string) bool {
	for _, p := range programs {
		if dir == p {
			return true
		}
	}
	return false
}

func isShared(dir string) bool {
	for _, p := range shared {
		if dir == p {
			return true
		}
	}
	return false
}

// importViolations returns one line per break of the rule (see above)
// among pkgs, all of module; names maps import paths to package names.
func importViolations(module string, pkgs []listedPackage) []string {
	names := map[string]string{}
	for _, p := range pkgs {
		names[p.ImportPath] = p.Name
	}
	short := func(path string) string { return strings.TrimPrefix(path, module+"/") }
	var out []string
	for _, p := range pkgs {
		home := top(module, p.ImportPath)
		if !isProgram(home) && !isShared(home) {
			// scripts/ may import any program, but no testrig outside
			// its _test.go files (other testrig packages excepted).
			if p.Name == "testrig" {
				continue
			}
			for _, d := range p.Deps {
				if top(module, d) != "" && names[d] == "testrig" {
					out = append(out, short(p.ImportPath)+" "+how(p, d)+" "+short(d)+
						": a testrig package may be imported only by _test.go files and other testrig packages")
				}
			}
			continue
		}
		for _, d := range p.Deps {
			there := top(module, d)
			if there == "" || there == home && names[d] != "testrig" {
				continue
			}
			how := how(p, d)
			switch {
			case names[d] == "testrig":
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": a testrig package may be imported only by _test.go files and other testrig packages")
			case there == "scripts":
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": "+home+"/ must not use anything under scripts/ (tools, benchmarks, system tests) outside _test.go files")
			case home == "protocol" && there == "lib":
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": the contract protocol/ must not use the infrastructure of lib/; move what it needs into protocol/ or the code that needs lib/ out of it")
			case isProgram(there) && isShared(home):
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": the shared library "+home+"/ must import no program ("+strings.Join(programs, "/, ")+"/)")
			case isProgram(there):
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": the program "+home+"/ must not use the program "+there+"/ outside _test.go files; move what both use into protocol/ (the contract) or lib/ (infrastructure)")
			}
		}
	}
	out = append(out, partViolations(module, pkgs)...)
	sort.Strings(out)
	return out
}

// how says whether p imports d itself or depends on it through others.
func how(p listedPackage, d string) string {
	for _, i := range p.Imports {
		if i == d {
			return "imports"
		}
	}
	return "depends on"
}

// partViolations returns one line per upward arrow and per circle of
// parts inside a program (see the rule above).
func partViolations(module string, pkgs []listedPackage) []string {
	short := func(path string) string { return strings.TrimPrefix(path, module+"/") }
	// part is the folder right under the program holding path ("" for
	// the program's own package).
	part := func(path string) string {
		rest := strings.TrimPrefix(short(path), top(module, path))
		rest = strings.TrimPrefix(rest, "/")
		first, _, _ := strings.Cut(rest, "/")
		return first
	}
	var out []string
	edges := map[string]map[string]bool{} // program/part → parts it depends on
	for _, p := range pkgs {
		home := top(module, p.ImportPath)
		if !isProgram(home) {
			continue
		}
		for _, d := range p.Deps {
			if top(module, d) != home {
				continue
			}
			if strings.HasPrefix(p.ImportPath, d+"/") && p.Name != "main" {
				how := "depends on"
				for _, i := range p.Imports {
					if i == d {
						how = "imports"
					}
				}
				out = append(out, short(p.ImportPath)+" "+how+" "+short(d)+
					": an arrow back up inside "+home+"/; a package never uses the package of a folder holding it (hand it what it needs instead)")
			}
			from, to := part(p.ImportPath), part(d)
			if from == "" || to == "" || from == to {
				continue
			}
			k := home + "/" + from
			if edges[k] == nil {
				edges[k] = map[string]bool{}
			}
			edges[k][home+"/"+to] = true
		}
	}
	// A circle of parts: a part that reaches itself.
	var nodes []string
	for n := range edges {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, start := range nodes {
		seen := map[string]bool{}
		var path []string
		var walk func(n string) bool
		walk = func(n string) bool {
			var next []string
			for m := range edges[n] {
				next = append(next, m)
			}
			sort.Strings(next)
			for _, m := range next {
				if m == start {
					path = append(path, m)
					return true
				}
				if !seen[m] {
					seen[m] = true
					path = append(path, m)
					if walk(m) {
						return true
					}
					path = path[:len(path)-1]
				}
			}
			return false
		}
		if walk(start) {
			out = append(out, start+" → "+strings.Join(path, " → ")+": a circle of parts; one of them must stop depending on the next")
		}
	}
	return out
}

func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(p); err == nil {
		return p, nil
	}
	return "", errors.New("no go command in PATH or GOROOT")
}

func TestImportRule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	gobin, err := goTool()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "list", "-e", "-json", "./...")
	cmd.Dir = ".." // the module's root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -e -json ./...: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	module := ""
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			// A package that does not load has incomplete Deps; its own
			// tests say why.
			t.Logf("%s does not load (%s); its imports are checked as far as go list knows them", p.ImportPath, p.Error.Err)
		}
		if p.Module != nil && strings.HasSuffix(p.ImportPath, "/protocol") && module == "" {
			module = p.Module.Path
		}
		pkgs = append(pkgs, p)
	}
	if module == "" || len(pkgs) < 10 {
		t.Fatalf("go list found %d packages and no module path; run the test from the module", len(pkgs))
	}
	// The rule must see each program, or it checks nothing.
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[top(module, p.ImportPath)] = true
	}
	for _, d := range append(append([]string{}, programs...), shared...) {
		if !seen[d] {
			t.Fatalf("go list reported no package under %s/: the rule's list of programs is out of date", d)
		}
	}
	// It must see the system tests and their rig where they live.
	for _, want := range []string{systest, systest + "/testrig"} {
		found := false
		for _, p := range pkgs {
			found = found || p.ImportPath == module+"/"+want
		}
		if !found {
			t.Fatalf("go list reported no package %s: the rule's list is out of date", want)
		}
	}
	for _, v := range importViolations(module, pkgs) {
		t.Error(v)
	}
}

// TestImportRuleCases checks the rule itself on made-up packages.
func TestImportRuleCases(t *testing.T) {
	const m = "example.com/x"
	pkg := func(path, name string, imports ...string) listedPackage {
		p := listedPackage{ImportPath: m + "/" + path, Name: name}
		for _, i := range imports {
			p.Imports = append(p.Imports, m+"/"+i)
		}
		return p
	}
	// deps fills Deps from Imports, transitively.
	deps := func(pkgs []listedPackage) []listedPackage {
		by := map[string]*listedPackage{}
		for i := range pkgs {
			by[pkgs[i].ImportPath] = &pkgs[i]
		}
		var walk func(p string, seen map[string]bool)
		walk = func(p string, seen map[string]bool) {
			for _, i := range by[p].Imports {
				if !seen[i] {
					seen[i] = true
					walk(i, seen)
				}
			}
		}
		for i := range pkgs {
			seen := map[string]bool{}
			walk(pkgs[i].ImportPath, seen)
			for d := range seen {
				pkgs[i].Deps = append(pkgs[i].Deps, d)
			}
			pkgs[i].Deps = append(pkgs[i].Deps, "fmt")
		}
		return pkgs
	}
	base := []listedPackage{
		pkg("protocol", "protocol"),
		pkg("protocol/session", "session", "protocol"),
		pkg("drivers", "drivers", "protocol"),
		pkg("coordinator/engine", "engine", "protocol", "drivers"),
		pkg("scripts/systest/testrig", "testrig", "coordinator/engine", "agent"),
		pkg("scripts/systest", "systest"),
		pkg("agent", "agent", "protocol/session", "drivers"),
		pkg("ramdisk/cmd/bmramdisk", "main", "protocol/session"),
		pkg("scripts/internal/loadrig", "loadrig", "protocol"),
		pkg("scripts/bench", "main", "agent", "scripts/internal/loadrig"),
	}
	cases := []struct {
		name  string
		extra []listedPackage
		want  []string
	}{
		{"the module as it should be", nil, nil},
		{"agent imports a ramdisk package", []listedPackage{pkg("ramdisk/session", "session", "protocol"), pkg("agent/sim", "sim", "ramdisk/session")},
			[]string{"agent/sim imports ramdisk/session: the program agent/ must not use the program ramdisk/"}},
		{"through another package", []listedPackage{pkg("agent/x", "x", "agent/y"), pkg("agent/y", "y", "coordinator/engine")},
			[]string{"agent/x depends on coordinator/engine", "agent/y imports coordinator/engine"}},
		{"a program imports the rig from non-test code", []listedPackage{pkg("coordinator/server", "server", "scripts/systest/testrig")},
			[]string{"coordinator/server depends on agent: the program coordinator/", "coordinator/server imports scripts/systest/testrig: a testrig package"}},
		{"a testrig inside a program", []listedPackage{pkg("agent/testrig", "testrig", "coordinator/engine"), pkg("agent/sim", "sim", "agent/testrig")},
			[]string{"agent/sim depends on coordinator/engine: the program agent/", "agent/sim imports agent/testrig: a testrig package", "agent/testrig imports coordinator/engine: the program agent/"}},
		{"a program imports a tool under scripts", []listedPackage{pkg("agent/sim", "sim", "scripts/internal/loadrig")},
			[]string{"agent/sim imports scripts/internal/loadrig: agent/ must not use anything under scripts/"}},
		{"a shared library imports the system tests", []listedPackage{pkg("protocol/x", "x", "scripts/systest")},
			[]string{"protocol/x imports scripts/systest: protocol/ must not use anything under scripts/"}},
		{"a tool under scripts imports the rig", []listedPackage{pkg("scripts/bench-x", "main", "scripts/systest/testrig")},
			[]string{"scripts/bench-x imports scripts/systest/testrig: a testrig package"}},
		{"a shared library imports a program", []listedPackage{pkg("drivers/x", "x", "agent")},
			[]string{"drivers/x imports agent: the shared library drivers/"}},
		{"the contract imports the infrastructure", []listedPackage{pkg("lib/kvstore", "kvstore"), pkg("protocol/x", "x", "lib/kvstore")},
			[]string{"protocol/x imports lib/kvstore: the contract protocol/"}},
		{"the infrastructure imports the contract", []listedPackage{pkg("lib/x", "x", "protocol")}, nil},
		{"an agent part imports the agent", []listedPackage{pkg("agent/relay", "relay", "protocol", "agent")},
			[]string{"agent/relay imports agent: an arrow back up inside agent/"}},
		{"through a sibling", []listedPackage{pkg("agent/relay", "relay", "agent/outbox"), pkg("agent/outbox", "outbox", "agent/outbox/store"), pkg("agent/outbox/store", "store", "agent")},
			[]string{"agent/outbox depends on agent: an arrow back up", "agent/outbox/store imports agent: an arrow back up", "agent/relay depends on agent: an arrow back up"}},
		{"parts in a circle", []listedPackage{pkg("agent/bmc", "bmc", "agent/boot/media"), pkg("agent/boot/media", "media", "protocol"), pkg("agent/boot", "boot", "agent/bmc")},
			[]string{"agent/bmc → agent/boot → agent/bmc: a circle of parts", "agent/boot → agent/bmc → agent/boot: a circle of parts"}},
		{"a command stands on top", []listedPackage{pkg("agent/cmd/agent", "main", "agent")}, nil},
		{"parts in a row", []listedPackage{pkg("agent/bmc", "bmc", "agent/boot/media"), pkg("agent/boot/media", "media", "protocol"), pkg("agent/boot", "boot", "agent/outbox"), pkg("agent/outbox", "outbox")}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkgs := deps(append(append([]listedPackage{}, base...), c.extra...))
			got := importViolations(m, pkgs)
			if len(got) != len(c.want) {
				t.Fatalf("violations:\n%s\nwant %d starting with:\n%s", strings.Join(got, "\n"), len(c.want), strings.Join(c.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.want[i]) {
					t.Errorf("violation %q, want one starting with %q", got[i], c.want[i])
				}
			}
		})
	}
}
