package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runHere runs the command line in this process.
func runHere(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(ctx, args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// noRequests is an API that fails the test on any request.
func noRequests(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a command made an HTTP request: %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("COORDINATOR_URL", srv.URL)
	for _, k := range []string{"OS_USERNAME", "OS_PASSWORD", "OS_CACERT"} {
		t.Setenv(k, "")
	}
	return srv.URL
}

// everyCommand is the whole tree below and with root, but cobra's
// hidden __complete commands.
func everyCommand(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, sub := range root.Commands() {
		if sub.Hidden {
			continue
		}
		out = append(out, everyCommand(sub)...)
	}
	return out
}

// TestEveryCommandAnswersHelp walks the command tree: every command and
// subcommand answers --help, -h and 'coordinator help ...' with exit 0,
// its usage line and its flags spelled with two dashes, on standard
// output, and makes no HTTP request, even with arguments before --help
// (node show --help once looked up a node named "--help", and node
// delete --help sent a DELETE for it).
func TestEveryCommandAnswersHelp(t *testing.T) {
	url := noRequests(t)
	root := (&cmd{ctx: context.Background(), stdin: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}}).newRoot()
	cmds := everyCommand(root)
	if len(cmds) < 30 {
		t.Fatalf("the tree has only %d commands", len(cmds))
	}
	for _, cc := range cmds {
		cc.InitDefaultHelpFlag()
		path := strings.Fields(cc.CommandPath())[1:]
		usage := "Usage:\n  " + usageLines(cc) + "\n"
		variants := [][]string{
			append(append([]string{}, path...), "--help"),
			append(append([]string{}, path...), "-h"),
			append(append([]string{"--url", url}, path...), "-f", "json", "--help"),
			append([]string{"help"}, path...),
		}
		if len(path) > 0 {
			variants = append(variants, append(append([]string{}, path...), "n1", "on", "--help"))
		}
		if cc.Flags().Lookup("wait") != nil {
			variants = append(variants, append(append([]string{}, path...), "n1", "--wait", "--help"))
		}
		for _, args := range variants {
			code, out, errOut := runHere(context.Background(), args...)
			if code != 0 {
				t.Errorf("coordinator %s: exit %d, want 0; stderr:\n%s", strings.Join(args, " "), code, errOut)
				continue
			}
			if !strings.Contains(out, usage) {
				t.Errorf("coordinator %s: stdout does not show %q:\n%s", strings.Join(args, " "), usage, out)
			}
			if errOut != "" {
				t.Errorf("coordinator %s: stderr %q", strings.Join(args, " "), errOut)
			}
			cc.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(out, "--"+f.Name) {
					t.Errorf("coordinator %s: help does not show --%s", strings.Join(args, " "), f.Name)
				}
			})
		}
	}
}

// TestUsageErrors checks that a command line that makes no sense exits 2
// saying what is wrong and where help is, without a request.
func TestUsageErrors(t *testing.T) {
	noRequests(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"Usage:\n  coordinator COMMAND", "node"}},
		{[]string{"node"}, []string{"Usage:\n  coordinator node COMMAND", "manage"}},
		{[]string{"completion"}, []string{"Usage:\n  coordinator completion COMMAND", "bash"}},
		{[]string{"completion", "tcsh"}, []string{`unknown command "tcsh" for "coordinator completion"`}},
		{[]string{"nosuch"}, []string{`unknown command "nosuch" for "coordinator"`, "Run 'coordinator --help'"}},
		{[]string{"node", "mange", "n1"}, []string{`unknown command "mange" for "coordinator node"`, "did you mean manage?"}},
		{[]string{"node", "show"}, []string{"coordinator node show takes one argument, NODE", "Run 'coordinator node show --help' for usage."}},
		{[]string{"node", "delete", "a", "b"}, []string{"takes one argument, NODE"}},
		{[]string{"node", "power", "n1"}, []string{"takes 2 arguments, NODE on|off|reboot"}},
		{[]string{"node", "power", "n1", "up"}, []string{`power "up" is not known`}},
		{[]string{"node", "create", "n1", "--driver", "fake"}, []string{`unexpected argument "n1"; the name is given with --name`}},
		{[]string{"node", "create"}, []string{"node create needs --driver (fake, ipmi, redfish, qemu-dev)"}},
		{[]string{"node", "list", "--bogus"}, []string{"unknown flag: --bogus", "Run 'coordinator node list --help'"}},
		{[]string{"node", "list", "-driver", "fake"}, []string{"unknown shorthand flag: 'd'"}},
		{[]string{"node", "list", "-f", "xml"}, []string{`output format "xml" is not known; use -f table, -f json, -f yaml`}},
		{[]string{"node", "set", "n1"}, []string{"nothing to set"}},
		{[]string{"node", "clean", "n1"}, []string{"node clean needs --clean-steps FILE|-"}},
		{[]string{"node", "rescue", "n1"}, []string{"node rescue needs --rescue-password PW"}},
		{[]string{"node", "manage", "n1", "--wait=soon"}, []string{`--wait takes seconds, not "soon"`}},
		{[]string{"site", "add", "s1"}, []string{"site add needs --credentials-file FILE"}},
		{[]string{"port", "create", "52:54:00:00:00:01"}, []string{"port create needs --node NODE"}},
		{[]string{"certs"}, []string{"certs needs --dir DIR"}},
		{[]string{"serve", "extra"}, []string{"coordinator serve takes no arguments"}},
		{[]string{"serve", "--clean-step-priority", "erase=3"}, []string{"want interface.step=N"}},
	} {
		code, out, errOut := runHere(context.Background(), c.args...)
		if code != 2 {
			t.Errorf("coordinator %q: exit %d, want 2; stdout %q, stderr %q", c.args, code, out, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("coordinator %q: stderr does not say %q:\n%s", c.args, w, errOut)
			}
		}
	}
}

// TestCompletion checks that each shell's completion script is printed,
// without a request.
func TestCompletion(t *testing.T) {
	noRequests(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := runHere(context.Background(), "completion", sh)
		if code != 0 || !strings.Contains(out, "coordinator") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", sh, code, len(out), errOut)
		}
	}
	code, out, _ := runHere(context.Background(), "__complete", "node", "power", "n1", "")
	if code != 0 || !strings.Contains(out, "reboot") {
		t.Errorf("completing node power n1: exit %d, %q", code, out)
	}
	code, out, _ = runHere(context.Background(), "__complete", "node", "create", "--driver", "")
	if code != 0 || !strings.Contains(out, "redfish") {
		t.Errorf("completing --driver: exit %d, %q", code, out)
	}
}

// TestCLIDocIsCurrent fails when docs/cli.md is not what the command
// tree makes, saying how to regenerate it.
func TestCLIDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(have, b.Bytes()) {
		return
	}
	hl, wl := strings.Split(string(have), "\n"), strings.Split(b.String(), "\n")
	for i := 0; i < len(hl) || i < len(wl); i++ {
		var h, w string
		if i < len(hl) {
			h = hl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if h != w {
			t.Fatalf("docs/cli.md is stale: regenerate it with %s.\nFirst difference, line %d:\n  docs/cli.md:   %q\n  command tree:  %q", DocCommand, i+1, h, w)
		}
	}
}

// TestDocNeedsNoEnvironment checks that the generated doc does not
// depend on the variables that set flags.
func TestDocNeedsNoEnvironment(t *testing.T) {
	var a, b bytes.Buffer
	if err := WriteMarkdown(&a); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"COORDINATOR_URL", "OS_USERNAME", "OS_PASSWORD", "OS_CACERT", "COORDINATOR_BROKER_PASSWORD"} {
		t.Setenv(k, "from-the-environment-"+k) // a marker no flag name holds
	}
	if err := WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() || strings.Contains(b.String(), "from-the-environment-") {
		t.Fatal("docs/cli.md changes with the environment")
	}
}
