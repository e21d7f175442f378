//go:build ignore

// shape.go checks the shape limits of the project's Go code (the library,
// the CLI, embedtest, the tests module with the safety suite; examples and
// the bench aside): no function longer than 60 lines, no file longer than
// 450 lines. Complexity is gocyclo's (see .ci/run). Run from the root:
//
//	go run .ci/shape.go
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	bad := 0
	_ = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "." || p == "examples" || p == "cmd/etcdlock-bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		if n := fset.Position(f.End()).Line; n > 450 {
			fmt.Printf("%s: %d lines, more than 450\n", p, n)
			bad++
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > 60 {
					fmt.Printf("%s: func %s has %d lines, more than 60\n", p, fd.Name.Name, n)
					bad++
				}
			}
		}
		return nil
	})
	if bad > 0 {
		os.Exit(1)
	}
}
