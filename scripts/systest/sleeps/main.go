// Command sleeps lists the fixed sleeps of Go test files: the calls of
// time.Sleep in _test.go files that stand outside any for or range loop of
// their function, so that they wait a fixed time rather than poll a
// condition (a sleep inside a loop is a poll's pause, or a wait on the
// clock). It prints one line per fixed sleep, then the counts.
//
//	go run ./scripts/systest/sleeps [dir ...]   (default: .)
//
// With -all it lists the sleeps inside loops too, marked "poll".
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	all := flag.Bool("all", false, "list the sleeps inside loops too")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var fixed, polls int
	var lines []string
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); path != dir && (strings.HasPrefix(n, ".") || n == "vendor" || n == "testdata" || n == "build") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, s := range sleeps(f) {
				pos := fset.Position(s.call.Pos())
				if s.inLoop {
					polls++
					if *all {
						lines = append(lines, fmt.Sprintf("%s:%d: poll", pos.Filename, pos.Line))
					}
					continue
				}
				fixed++
				lines = append(lines, fmt.Sprintf("%s:%d: fixed", pos.Filename, pos.Line))
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "sleeps:", err)
			os.Exit(1)
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("%d fixed time.Sleep calls in _test.go files, %d inside loops (%d in all)\n", fixed, polls, fixed+polls)
}

type sleep struct {
	call   *ast.CallExpr
	inLoop bool
}

// sleeps finds the time.Sleep calls of a file and whether a for or range
// loop of the same function holds each (a function literal starts anew:
// a sleep in a goroutine's body is fixed unless that body loops).
func sleeps(f *ast.File) []sleep {
	var out []sleep
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "time" {
			return true
		}
		in := false
	walk:
		for i := len(stack) - 2; i >= 0; i-- {
			switch stack[i].(type) {
			case *ast.ForStmt, *ast.RangeStmt:
				in = true
				break walk
			case *ast.FuncLit, *ast.FuncDecl:
				break walk
			}
		}
		out = append(out, sleep{call, in})
		return true
	})
	return out
}
