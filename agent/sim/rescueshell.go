package sim

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/clock"
)

// rescueShell is what a simulated node's rescue login runs: no shell and
// no process of the agent's host, only a few built-in commands whose
// answers are the simulated node's (its hostname, kernel, memory, CPUs
// and disk from the simulated inventory). The commands are listed by
// help; anything else is "not found". Commands are split on ";" and
// "&&", words on blanks with single and double quotes; nothing is
// expanded.
type rescueShell struct {
	host, site string
	inventory  map[string]any
	clock      clock.Clock // its uptime's
	started    time.Time
	term       bool
}

// maxLine bounds an input line of the interactive shell.
const maxLine = 4096

const rescueHelp = `This is the simulated rescue login of a node of make run's simulated site:
no real system is behind it. Built-in commands:
  help                    this text
  hostname                the node (its UUID)
  uname [-a|-s|-n|-r|-m]  the kernel
  cat FILE...             /proc/cmdline, /proc/version, /proc/cpuinfo, /proc/meminfo,
                          /proc/uptime, /etc/hostname
  lsblk                   the node's disks
  id, whoami, pwd, echo ARGS..., true, false, exit [N]
A real node's rescue ramdisk has a shell with u-root's commands instead.
`

func (r *rescueShell) Pty(term string, cols, rows uint32) bool { r.term = true; return true }
func (r *rescueShell) Resize(cols, rows uint32)                {}
func (r *rescueShell) Hangup()                                 {}
func (r *rescueShell) Close()                                  {}

// Start runs one command line (exec) or the interactive shell on ch.
func (r *rescueShell) Start(ch ssh.Channel, isExec bool, command string) (<-chan int, error) {
	done := make(chan int, 1)
	out, errOut := io.Writer(ch), io.Writer(ch.Stderr())
	if r.term {
		// A terminal wants CR LF, and has no stderr of its own.
		out = crlf{ch}
		errOut = out
	}
	go func() {
		if isExec {
			code, _ := r.run(command, out, errOut)
			done <- code
			return
		}
		done <- r.interactive(ch, out, errOut)
	}()
	return done, nil
}

// interactive reads command lines from in until exit or the end of the
// input; on a terminal it echoes and edits the line as a terminal's line
// discipline would and shows a prompt.
func (r *rescueShell) interactive(in io.Reader, out, errOut io.Writer) int {
	fmt.Fprintf(out, "bmedge rescue (simulated) on node %s; type help for the commands\n", r.host)
	br := bufio.NewReaderSize(in, 512)
	code := 0
	for {
		if r.term {
			fmt.Fprintf(out, "root@%s:/# ", r.host)
		}
		line, ok := r.readLine(br, out)
		if !ok {
			if r.term {
				fmt.Fprint(out, "exit\n")
			}
			return code
		}
		var exit bool
		code, exit = r.run(line, out, errOut)
		if exit {
			return code
		}
	}
}

// readLine reads one line; on a terminal it echoes what is typed, takes
// backspace, ^U (erase the line) and ^C (drop it), ends the input at ^D
// on an empty line and skips escape sequences (arrow keys).
func (r *rescueShell) readLine(br *bufio.Reader, out io.Writer) (string, bool) {
	var b []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			if len(b) > 0 && !r.term {
				return string(b), true
			}
			return "", false
		}
		if !r.term {
			if c == '\n' {
				return string(b), true
			}
			if len(b) < maxLine {
				b = append(b, c)
			}
			continue
		}
		switch {
		case c == '\r' || c == '\n':
			fmt.Fprint(out, "\n")
			return string(b), true
		case c == 0x7f || c == 0x08:
			if len(b) > 0 {
				_, n := utf8.DecodeLastRune(b)
				b = b[:len(b)-n]
				fmt.Fprint(out, "\b \b")
			}
		case c == 0x03:
			fmt.Fprint(out, "^C\n")
			return "", true
		case c == 0x04:
			if len(b) == 0 {
				return "", false
			}
		case c == 0x15:
			fmt.Fprint(out, strings.Repeat("\b \b", utf8.RuneCount(b)))
			b = b[:0]
		case c == 0x1b:
			// ESC [ ... final byte: a cursor key or the like.
			if n, _ := br.Peek(1); len(n) == 1 && (n[0] == '[' || n[0] == 'O') {
				_, _ = br.ReadByte()
				for {
					f, err := br.ReadByte()
					if err != nil || f >= 0x40 && f <= 0x7e {
						break
					}
				}
			}
		case c < 0x20:
		default:
			if len(b) < maxLine {
				b = append(b, c)
				_, _ = out.Write([]byte{c})
			}
		}
	}
}

// run runs a command line: commands split on ";" (each runs) and "&&"
// (the next runs if this one succeeded). It returns the last status and
// whether the line ran exit.
func (r *rescueShell) run(line string, out, errOut io.Writer) (int, bool) {
	code := 0
	for _, seq := range strings.Split(line, ";") {
		for i, part := range strings.Split(seq, "&&") {
			if i > 0 && code != 0 {
				break
			}
			args, err := words(part)
			if err != nil {
				fmt.Fprintf(errOut, "sh: %v\n", err)
				code = 2
				break
			}
			if len(args) == 0 {
				continue
			}
			var exit bool
			code, exit = r.command(args, out, errOut)
			if exit {
				return code, true
			}
		}
	}
	return code, false
}

// words splits a command into words on blanks, with ” and "" quoting.
func words(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, c := range s {
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote %c", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

func (r *rescueShell) command(args []string, out, errOut io.Writer) (int, bool) {
	switch args[0] {
	case "help":
		fmt.Fprint(out, rescueHelp)
	case "hostname":
		fmt.Fprintln(out, r.host)
	case "echo":
		fmt.Fprintln(out, strings.Join(args[1:], " "))
	case "true":
	case "false":
		return 1, false
	case "pwd":
		fmt.Fprintln(out, "/")
	case "id":
		fmt.Fprintln(out, "uid=0(root) gid=0(root) groups=0(root)")
	case "whoami":
		fmt.Fprintln(out, "root")
	case "exit":
		code := 0
		if len(args) > 1 {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				fmt.Fprintf(errOut, "sh: exit: %s: numeric argument required\n", args[1])
				return 2, true
			}
			code = n & 0xff
		}
		return code, true
	case "uname":
		return r.uname(args[1:], out, errOut), false
	case "cat":
		code := 0
		for _, f := range args[1:] {
			text, ok := r.file(f)
			if !ok {
				fmt.Fprintf(errOut, "cat: %s: No such file or directory\n", f)
				code = 1
				continue
			}
			fmt.Fprint(out, text)
		}
		return code, false
	case "lsblk":
		fmt.Fprintln(out, "NAME   SIZE TYPE")
		for _, d := range r.disks() {
			fmt.Fprintf(out, "%-4s %5dG disk\n", strings.TrimPrefix(d.name, "/dev/"), d.size>>30)
		}
	default:
		fmt.Fprintf(errOut, "sh: %s: not found (this simulated rescue login has a few built-in commands: type help)\n", args[0])
		return 127, false
	}
	return 0, false
}

const (
	simKernel  = "6.1.0-bmedge-simulated"
	simVersion = "#1 SMP PREEMPT_DYNAMIC simulated"
)

func (r *rescueShell) uname(flags []string, out, errOut io.Writer) int {
	parts := map[byte]string{'s': "Linux", 'n': r.host, 'r': simKernel, 'v': simVersion, 'm': "x86_64", 'o': "GNU/Linux"}
	want := map[byte]bool{}
	for _, f := range flags {
		if f == "-a" || f == "--all" {
			f = "-snrvmo"
		}
		if !strings.HasPrefix(f, "-") || len(f) < 2 {
			fmt.Fprintf(errOut, "uname: extra operand %q\n", f)
			return 1
		}
		for i := 1; i < len(f); i++ {
			if _, ok := parts[f[i]]; !ok {
				fmt.Fprintf(errOut, "uname: invalid option -- '%c'\n", f[i])
				return 1
			}
			want[f[i]] = true
		}
	}
	if len(want) == 0 {
		want['s'] = true
	}
	var s []string
	for _, k := range []byte("snrvmo") {
		if want[k] {
			s = append(s, parts[k])
		}
	}
	fmt.Fprintln(out, strings.Join(s, " "))
	return 0
}

// file is the text of one of the few files the simulated node has.
func (r *rescueShell) file(name string) (string, bool) {
	switch name {
	case "/proc/cmdline":
		return fmt.Sprintf("console=ttyS0 bm.site=%s bm.node=%s bm.simulated=1\n", r.site, r.host), true
	case "/proc/version":
		return fmt.Sprintf("Linux version %s (simulated) %s\n", simKernel, simVersion), true
	case "/etc/hostname":
		return r.host + "\n", true
	case "/proc/uptime":
		up := clock.Since(r.clock, r.started).Seconds()
		return fmt.Sprintf("%.2f %.2f\n", up, up), true
	case "/proc/meminfo":
		mem, _ := r.inventory["memory"].(map[string]any)
		total := toInt64(mem["total_bytes"]) >> 10
		return fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n", total, total*9/10, total*9/10), true
	case "/proc/cpuinfo":
		cpu, _ := r.inventory["cpu"].(map[string]any)
		model, _ := cpu["model_name"].(string)
		var b strings.Builder
		for i := range toInt64(cpu["count"]) {
			fmt.Fprintf(&b, "processor\t: %d\nmodel name\t: %s\n\n", i, model)
		}
		return b.String(), true
	}
	return "", false
}

type disk struct {
	name string
	size int64
}

func (r *rescueShell) disks() []disk {
	list, _ := r.inventory["disks"].([]any)
	var out []disk
	for _, d := range list {
		m, _ := d.(map[string]any)
		name, _ := m["name"].(string)
		out = append(out, disk{name: name, size: toInt64(m["size"])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// crlf writes LF as CR LF, as a terminal's output processing does.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
