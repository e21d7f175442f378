package etcdlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The examples of example_test.go, example_holder_test.go and
// example_once_test.go have compile-only copies in the library's package
// (example_recipes_test.go at the root), so that its documentation shows
// them. The copies use a client of a real cluster in place of the
// embedded one and have no Output comment; everything else is the same.

const (
	embeddedSetup = `
	c := startCluster()
	defer c.Close()
	cli, err := c.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
`
	realSetup = `
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
`
)

// TestExamplesInStep checks that the root's copies of the examples are
// the examples here, as above.
func TestExamplesInStep(t *testing.T) {
	copies := examples(t, filepath.Join("..", "..", "example_recipes_test.go"))
	here := map[string]example{}
	for _, f := range []string{"example_test.go", "example_holder_test.go", "example_once_test.go"} {
		for name, e := range examples(t, f) {
			here[name] = e
		}
	}
	if len(copies) != len(here) {
		t.Errorf("%d examples here, %d copies at the root", len(here), len(copies))
	}
	for name, e := range here {
		c, ok := copies[name]
		if !ok {
			t.Errorf("%s has no copy in example_recipes_test.go", name)
			continue
		}
		body, ok := strings.CutPrefix(e.body, embeddedSetup)
		if !ok {
			t.Errorf("%s does not start with startCluster's setup", name)
			continue
		}
		if i := strings.Index(body, "\t// Output:"); i >= 0 {
			body = body[:i]
		}
		if want := realSetup + body; c.body != want || c.doc != e.doc {
			t.Errorf("the copy of %s is not in step with it:\n%s%s\nwant\n%s%s", name, c.doc, c.body, e.doc, want)
		}
	}
}

type example struct{ doc, body string }

// examples returns the Example functions of the file at path, by name:
// their doc comments and the text between their braces.
func examples(t *testing.T, path string) map[string]example {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]example{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fd.Name.Name, "Example") {
			continue
		}
		from, to := fset.Position(fd.Body.Lbrace).Offset+1, fset.Position(fd.Body.Rbrace).Offset
		out[fd.Name.Name] = example{doc: fd.Doc.Text(), body: string(src[from:to])}
	}
	return out
}
