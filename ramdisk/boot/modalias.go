package boot

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Alias is one line of modules.alias: a glob pattern and the module that
// drives devices whose modalias matches it.
type Alias struct {
	Pattern string
	Module  string
}

// AliasTable is a parsed modules.alias.
type AliasTable struct {
	aliases []Alias
}

// ParseAliases reads modules.alias ("alias PATTERN MODULE" lines, comments
// with #) as written by depmod.
func ParseAliases(r io.Reader) (*AliasTable, error) {
	t := &AliasTable{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 3 || f[0] != "alias" {
			return nil, fmt.Errorf("modules.alias line %d: want `alias PATTERN MODULE`, got %q", line, s)
		}
		t.aliases = append(t.aliases, Alias{Pattern: f[1], Module: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules.alias: %w", err)
	}
	return t, nil
}

// Len is the number of aliases.
func (t *AliasTable) Len() int { return len(t.aliases) }

// Match returns the modules whose alias patterns match modalias, in table
// order, without duplicates.
func (t *AliasTable) Match(modalias string) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range t.aliases {
		if !seen[a.Module] && Glob(a.Pattern, modalias) {
			seen[a.Module] = true
			out = append(out, a.Module)
		}
	}
	return out
}

// ModulesFor returns the sorted, de-duplicated modules matching any of
// the given modaliases, leaving out those in skip (names are compared
// with '-' and '_' treated alike, as the kernel does).
func (t *AliasTable) ModulesFor(modaliases []string, skip map[string]bool) []string {
	set := map[string]bool{}
	for _, m := range modaliases {
		for _, mod := range t.Match(m) {
			n := NormalizeModule(mod)
			if !skip[n] {
				set[n] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// NormalizeModule turns a module name into the kernel's spelling
// (underscores, as in /proc/modules).
func NormalizeModule(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// ReadModaliases returns the modaliases of the devices the kernel knows,
// sorted and de-duplicated. fsys is meant to be os.DirFS("/sys"). It reads
// the "modalias" file of every device on a bus (bus/*/devices/*: PCI,
// virtio, SCSI, USB, ACPI, platform...), of every class device
// (class/*/*: input devices, the DMI identity) and the CPU's
// (devices/system/cpu), which together are every modalias below
// /sys/devices, without walking that whole tree: under TCG a walk of its
// ~5000 entries took 0.2-0.8 s a pass, the bus and class lists 0.03-0.15 s.
// Unreadable or empty files are skipped: devices come and go while we read.
func ReadModaliases(fsys fs.FS) ([]string, error) {
	set := map[string]bool{}
	read := func(p string) {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			set[s] = true
		}
	}
	buses, err := fs.ReadDir(fsys, "bus")
	if err != nil {
		return nil, err
	}
	for _, b := range buses {
		dir := path.Join("bus", b.Name(), "devices")
		devs, _ := fs.ReadDir(fsys, dir)
		for _, d := range devs {
			read(path.Join(dir, d.Name(), "modalias"))
		}
	}
	classes, _ := fs.ReadDir(fsys, "class")
	for _, c := range classes {
		dir := path.Join("class", c.Name())
		devs, _ := fs.ReadDir(fsys, dir)
		for _, d := range devs {
			read(path.Join(dir, d.Name(), "modalias"))
		}
	}
	read("devices/system/cpu/modalias")
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// Glob reports whether name matches the shell pattern, as fnmatch(3)
// with no flags (which kmod uses for modules.alias): '*' matches any
// string including '/', '?' any one character, '[...]' a class with
// ranges and '!' or '^' negation, '\' quotes the next character.
// A malformed class matches its '[' literally.
func Glob(pattern, name string) bool {
	px, nx := 0, 0
	// Position to resume from after the last '*': classic backtracking
	// that is linear enough for modalias strings.
	starP, starN := -1, 0
	for nx < len(name) || px < len(pattern) {
		if px < len(pattern) {
			c := pattern[px]
			switch c {
			case '*':
				starP, starN = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					px++
					nx++
					continue
				}
			case '[':
				if nx < len(name) {
					ok, width, valid := matchClass(pattern[px:], name[nx])
					if !valid {
						if name[nx] == '[' {
							px++
							nx++
							continue
						}
					} else if ok {
						px += width
						nx++
						continue
					}
				}
			case '\\':
				if px+1 < len(pattern) {
					if nx < len(name) && name[nx] == pattern[px+1] {
						px += 2
						nx++
						continue
					}
					break
				}
				fallthrough // trailing backslash matches itself
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if starP >= 0 && starN < len(name) {
			starN++
			px, nx = starP+1, starN
			continue
		}
		return false
	}
	return true
}

// matchClass matches c against the class at the start of p ("[...]").
// It returns whether c is in the class, the class's width in p, and
// whether the class is well formed (has a closing ']').
func matchClass(p string, c byte) (match bool, width int, valid bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return match != negate, i + 1, true
		}
		first = false
		lo := p[i]
		if lo == '\\' && i+1 < len(p) {
			i++
			lo = p[i]
		}
		i++
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi = p[i+1]
			if hi == '\\' && i+2 < len(p) {
				hi = p[i+2]
				i++
			}
			i += 2
		}
		if lo <= c && c <= hi {
			match = true
		}
	}
	return false, 0, false
}
