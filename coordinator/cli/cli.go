// Package cli is the operator's command line: `coordinator serve` and the
// verbs that talk to a running coordinator's API, built on cobra. Only
// this package and main read flags. It must never touch the database
// directly.
//
// docs/cli.md is generated from the command tree (make cli-doc), so the
// prose a reader needs lives in the commands' Long and Example texts.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Main runs the command line with args (without the program name) and
// returns the exit status: 0 done, 1 failed (the API refused, a --wait
// ended anywhere but the verb's target), 2 a usage error or a --wait
// timeout, 130 interrupted during --wait.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(context.Background(), args, stdin, stdout, stderr)
}

// run is Main with a context whose cancellation stands for Ctrl-C.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cmd{ctx: ctx, stdin: stdin, out: stdout, err: stderr}
	root := c.newRoot()
	root.SetArgs(waitSeconds(args))
	cc, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var ue *usageError
	if errors.As(err, &ue) || !c.ran {
		fmt.Fprintf(stderr, "error: %v\nRun '%s --help' for usage.\n", err, cc.CommandPath())
		return 2
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return 1
}

// cmd is one run of the command line: its streams and global flags.
type cmd struct {
	ctx      context.Context
	stdin    io.Reader
	out, err io.Writer
	url      string
	format   string
	columns  []string
	creds    credentials
	// ran is set once flags and arguments were accepted and a command
	// starts: errors before it are usage errors (exit 2).
	ran bool
}

// defaultURL is where the client looks for the API without --url or
// COORDINATOR_URL; `serve --api-listen` has the same address.
const (
	defaultAPIListen = "127.0.0.1:6385"
	defaultURL       = "http://" + defaultAPIListen
)

// usageError is a command line that does not make sense: exit 2, with a
// pointer to the command's --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// exitCode ends the program with that status; the command has already
// said why on standard error.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Flag kinds: a global flag is shown in a command's help only when the
// command uses it (serve has no use for --url).
const (
	kindKey    = "bmedge_kind"
	kindClient = "client" // the API's address and credentials
	kindOutput = "output" // -f and -c
)

// Command annotations saying which global flags a command uses.
const (
	usesClient = "bmedge_uses_client"
	usesOutput = "bmedge_uses_output"
)

func annotate(cc *cobra.Command, keys ...string) *cobra.Command {
	if cc.Annotations == nil {
		cc.Annotations = map[string]string{}
	}
	for _, k := range keys {
		cc.Annotations[k] = "true"
	}
	return cc
}

// envFlags are the global flags a variable sets when the flag is not
// given. The OS_* names are the baremetal CLI's, so one set of variables
// serves both.
var envFlags = []struct{ flag, env string }{
	{"url", "COORDINATOR_URL"},
	{"os-username", "OS_USERNAME"},
	{"os-password", "OS_PASSWORD"},
	{"os-cacert", "OS_CACERT"},
}

const rootLong = `coordinator: bare-metal lifecycle for remote sites, in Ironic's tradition.

One binary is the server (` + "`coordinator serve`" + `) and the operator's client of its API.
Every command and subcommand takes ` + "`--help`" + `; ` + "`coordinator completion bash|zsh|fish`" + `
prints a shell completion script. NODE is a node's name or UUID.

Against a coordinator with ` + "`--auth http_basic`" + ` and/or TLS, the client takes the same
credentials as Ironic's ` + "`baremetal`" + ` CLI (` + "`--os-username`, `--os-password`, `--os-cacert`" + `,
or ` + "`OS_USERNAME`, `OS_PASSWORD`, `OS_CACERT`" + `), so one set of variables serves both;
prefer the variable for the password, as flags show in ps. Only the CA of ` + "`--os-cacert`" + `
is trusted for an https coordinator, not the system's. A 401 says which of these to
set; an untrusted or mismatched certificate says which CA or host name to use.

Exit status: 0 done; 1 failed (the API refused, or a ` + "`--wait`" + ` ended anywhere but the
verb's target); 2 a usage error or a ` + "`--wait`" + ` timeout; 130 interrupted during ` + "`--wait`" + `
(the operation carries on at the coordinator).`

func (c *cmd) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:               "coordinator",
		Short:             "Bare-metal lifecycle for remote sites, in Ironic's tradition",
		Long:              rootLong,
		Example:           "  coordinator serve\n  coordinator node list\n  coordinator node manage n1 --wait\n  coordinator node show n1 -f json",
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              cobra.ArbitraryArgs,
		RunE:              c.group,
		PersistentPreRunE: c.start,
	}
	root.SetIn(c.stdin)
	root.SetOut(c.out)
	root.SetErr(c.err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate(helpTemplate)

	pf := root.PersistentFlags()
	pf.StringVar(&c.url, "url", defaultURL, "`URL` of the coordinator's API (env COORDINATOR_URL)")
	pf.StringVarP(&c.format, "format", "f", "table", "output `FORMAT`: "+strings.Join(formats, ", "))
	pf.StringArrayVarP(&c.columns, "column", "c", nil, "show only this `COLUMN` (a field name, e.g. provision_state; repeatable)")
	pf.StringVar(&c.creds.user, "os-username", "", "`USER` at a coordinator with --auth http_basic (env OS_USERNAME)")
	pf.StringVar(&c.creds.password, "os-password", "", "its `PASSWORD` (env OS_PASSWORD; the variable keeps it out of ps)")
	pf.StringVar(&c.creds.cacert, "os-cacert", "", "CA certificate `FILE` that signed an https coordinator's (env OS_CACERT)")
	for _, n := range []string{"url", "os-username", "os-password", "os-cacert"} {
		_ = pf.SetAnnotation(n, kindKey, []string{kindClient})
	}
	for _, n := range []string{"format", "column"} {
		_ = pf.SetAnnotation(n, kindKey, []string{kindOutput})
	}
	_ = root.RegisterFlagCompletionFunc("format", fixed(formats...))
	_ = root.RegisterFlagCompletionFunc("column", cobra.NoFileCompletions)

	root.AddGroup(&cobra.Group{ID: "server", Title: "Server:"}, &cobra.Group{ID: "client", Title: "Client of the API:"})
	for _, sub := range []*cobra.Command{c.serveCmd(), c.certsCmd(), c.restoreCmd()} {
		sub.GroupID = "server"
		root.AddCommand(sub)
	}
	for _, sub := range []*cobra.Command{c.siteCmd(), c.nodeCmd(), c.portCmd(), c.templateCmd(), c.runbookCmd(), c.inspectionRuleCmd(), c.backupCmd(), c.clusterCmd()} {
		sub.GroupID = "client"
		root.AddCommand(sub)
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		// As every other group: no shell is a usage error, an unknown one too.
		comp.Args, comp.RunE = cobra.ArbitraryArgs, c.group
	}
	return root
}

// start runs before every command: the variables behind unset global
// flags, and the output format.
func (c *cmd) start(cc *cobra.Command, _ []string) error {
	c.applyEnv(cc)
	if !knownFormat(c.format) {
		return usagef("output format %q is not known; use -f %s", c.format, strings.Join(formats, ", -f "))
	}
	c.ran = true
	return nil
}

func (c *cmd) applyEnv(cc *cobra.Command) {
	for _, e := range envFlags {
		f := cc.Flags().Lookup(e.flag)
		if f == nil || f.Changed {
			continue
		}
		if v := os.Getenv(e.env); v != "" {
			_ = f.Value.Set(v)
		}
	}
}

// group is the Run of a command that only holds others: without a
// subcommand it prints its help (exit 2), with an unknown one it says so.
func (c *cmd) group(cc *cobra.Command, args []string) error {
	if len(args) == 0 {
		cc.SetOut(c.err)
		_ = cc.Help()
		return exitCode(2)
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cc.CommandPath())
	if cc.SuggestionsMinimumDistance <= 0 {
		cc.SuggestionsMinimumDistance = 2
	}
	if s := cc.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usagef("%s", msg)
}

// groupCmd is a command that holds subcommands.
func (c *cmd) groupCmd(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ArbitraryArgs, RunE: c.group}
	g.AddCommand(subs...)
	return g
}

// args checks a command's positional arguments against their names.
func args(names ...string) cobra.PositionalArgs {
	return func(cc *cobra.Command, a []string) error {
		if len(a) == len(names) {
			return nil
		}
		want := "no arguments"
		switch len(names) {
		case 0:
		case 1:
			want = "one argument, " + names[0]
		default:
			want = fmt.Sprintf("%d arguments, %s", len(names), strings.Join(names, " "))
		}
		if len(a) == 0 {
			return usagef("%s takes %s", cc.CommandPath(), want)
		}
		return usagef("%s takes %s; got %q", cc.CommandPath(), want, a)
	}
}

// fixed completes a flag or argument from a fixed list.
func fixed(vals ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return vals, cobra.ShellCompDirectiveNoFileComp
	}
}

// kv collects repeated K=V flags.
type kv map[string]string

func (m kv) String() string { return "" }
func (m kv) Type() string   { return "K=V" }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	m[k] = v
	return nil
}

// list collects repeated flags.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Type() string       { return "VALUE" }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

var _ pflag.Value = kv{}

// waitFlag is --wait[=SECONDS]: follow the node, giving up after SECONDS
// when given. pflag shows an optional value through NoOptDefVal, so that
// is the word SECONDS itself, meaning "no limit".
type waitFlag struct {
	on   bool
	secs int
}

const waitNoLimit = "SECONDS"

func (w *waitFlag) String() string {
	if !w.on || w.secs == 0 {
		return ""
	}
	return fmt.Sprint(w.secs)
}

// Type is "bool" so that help shows --wait[=SECONDS] and completion
// expects no value.
func (w *waitFlag) Type() string { return "bool" }
func (w *waitFlag) Set(s string) error {
	switch s {
	case waitNoLimit, "true", "":
		w.on, w.secs = true, 0
		return nil
	case "false":
		w.on, w.secs = false, 0
		return nil
	}
	if !digits.MatchString(s) {
		return fmt.Errorf("--wait takes seconds, not %q", s)
	}
	_, err := fmt.Sscan(s, &w.secs)
	w.on = err == nil
	return err
}

func addWait(fs *pflag.FlagSet, w *waitFlag, usage string) {
	fs.Var(w, "wait", usage)
	fs.Lookup("wait").NoOptDefVal = waitNoLimit
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// waitSeconds joins "--wait 600" into "--wait=600", so that the optional
// value may also follow a space, as with the baremetal CLI.
func waitSeconds(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--wait" && i+1 < len(args) && digits.MatchString(args[i+1]) {
			out = append(out, "--wait="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

// shownFlags are the global flags that cc uses, for its help.
func shownFlags(cc *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(cc.Name(), pflag.ContinueOnError)
	cc.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if flagShown(cc, f) {
			fs.AddFlag(f)
		}
	})
	return fs
}

// flagShown says whether global flag f matters to cc.
func flagShown(cc *cobra.Command, f *pflag.Flag) bool {
	kind := f.Annotations[kindKey]
	switch {
	case f.Hidden:
		return false
	case len(kind) == 0:
		return true
	case kind[0] == kindClient:
		return uses(cc, usesClient)
	case kind[0] == kindOutput:
		return uses(cc, usesOutput)
	}
	return true
}

// uses says whether cc or one of its subcommands is annotated with key.
func uses(cc *cobra.Command, key string) bool {
	if cc.Annotations[key] == "true" {
		return true
	}
	for _, s := range cc.Commands() {
		if uses(s, key) {
			return true
		}
	}
	return false
}

func init() {
	// Commands are listed in the order they are added: a node's
	// lifecycle, not the alphabet.
	cobra.EnableCommandSorting = false
	cobra.AddTemplateFunc("globalFlags", func(cc *cobra.Command) string { return flagUsages(shownFlags(cc)) })
	cobra.AddTemplateFunc("flagUsages", flagUsages)
	cobra.AddTemplateFunc("hasGlobalFlags", func(cc *cobra.Command) bool { return shownFlags(cc).HasAvailableFlags() })
	cobra.AddTemplateFunc("isGroup", func(cc *cobra.Command) bool { return cc.HasAvailableSubCommands() })
}

// flagUsages lists flags wrapped to the terminal's width (100 columns
// when standard output is not a terminal).
func flagUsages(fs *pflag.FlagSet) string {
	width, tty := terminalWidth(os.Stdout)
	if !tty {
		width = 100
	}
	return strings.TrimRight(fs.FlagUsagesWrapped(width-1), " \n")
}

// usageTemplate is cobra's, less the "[flags]" line of group commands
// and the global flags a command has no use for.
const usageTemplate = `Usage:{{if isGroup .}}
  {{.CommandPath}} COMMAND{{else}}
  {{.UseLine}}{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if not .AllChildCommandsHaveGroup}}

Other commands:{{range $cmds}}{{if (and (eq .GroupID "") (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{flagUsages .LocalFlags}}{{end}}{{if hasGlobalFlags .}}

Global flags (anywhere on the line):
{{globalFlags .}}{{end}}{{if .HasAvailableSubCommands}}

Run '{{.CommandPath}} COMMAND --help' for a command's flags.{{end}}
`

const helpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{.UsageString}}`
