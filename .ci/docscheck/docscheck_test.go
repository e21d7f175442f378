package main

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Layout", "layout"},
		{"Writes of unknown outcome (the rule everything else rests on)", "writes-of-unknown-outcome-the-rule-everything-else-rests-on"},
		{"The command's tree (etcdlock run)", "the-commands-tree-etcdlock-run"},
		{"Several names at once (LockAll)", "several-names-at-once-lockall"},
		{"Checking the move exhaustively (internal/shardmodel)", "checking-the-move-exhaustively-internalshardmodel"},
		{"Lock-delay", "lock-delay"},
		{"`etcdlock serve`", "etcdlock-serve"},
		{"Rules, switches and code", "rules-switches-and-code"},
		{"snake_case and 1.2.3", "snake_case-and-123"},
		{"A - B", "a---b"},
		{"Über größe", "über-größe"},
		{"See [the docs](docs/x.md) <em>now</em>", "see-the-docs-now"},
		{"**Bold** & *more*!", "bold--more"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestSluggerDuplicates(t *testing.T) {
	s := slugger{}
	var got []string
	for _, h := range []string{"Bounds", "Bounds", "Other", "Bounds", "Bounds-1"} {
		got = append(got, s.slug(h))
	}
	want := []string{"bounds", "bounds-1", "other", "bounds-2", "bounds-1-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("slugs = %q, want %q", got, want)
	}
}

func TestHeadings(t *testing.T) {
	md := "# Title\n\n## Two ##\n#nope\n```\n# in code\n```\nSetext\n======\n\n- item\n---\n| a |\n---\n<!--\n# commented\n-->\n    ### Indented four\n"
	want := []string{"Title", "Two", "Setext"}
	if got := headings(md); !reflect.DeepEqual(got, want) {
		t.Errorf("headings = %q, want %q", got, want)
	}
}

func TestExtractLinks(t *testing.T) {
	md := strings.Join([]string{
		"See [a](a.md) and ![img](docs/ui.png \"title\").", // 1
		"Inline `[not](code.md)` and ``[nor](x.md)``.",     // 2
		"```go",               // 3
		"[fenced](fenced.md)", // 4
		"```",                 // 5
		"[angle](<with space.md#x>) [paren](f(1).md)", // 6
		"[![badge](b.svg)](https://x.y/z)",            // 7
		"[multi",                                      // 8
		"line](m.md) plain ](nope.md)",                // 9
		"[ref]: ref.md#anchor",                        // 10
		"<!-- [hidden](h.md) -->",                     // 11
		"  ~~~",                                       // 12
		"  [tilde](t.md)",                             // 13
		"  ~~~",                                       // 14
		`\[esc] [e\]x](e.md) [t](#top 'T')`,           // 15
		"[bad](unclosed.md",                           // 16
	}, "\n")
	want := []link{
		{1, "a.md"}, {1, "docs/ui.png"}, {6, "with space.md#x"}, {6, "f(1).md"},
		{7, "b.svg"}, {7, "https://x.y/z"}, {9, "m.md"}, {10, "ref.md#anchor"},
		{15, "e.md"}, {15, "#top"},
	}
	if got := extractLinks(md); !reflect.DeepEqual(got, want) {
		t.Errorf("extractLinks =\n%v\nwant\n%v", got, want)
	}
}

func TestCheckLinks(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":        {Data: []byte("# Top\n## Use it\n## Use it\n[a](docs/guide.md#setup) [b](#use-it-1) [c](#nope)\n[d](docs/gone.md) [e](examples) [f](https://x.y/#q) [g](DESIGN.md#Layout)\n")},
		"DESIGN.md":        {Data: []byte("## Layout\n")},
		"docs/guide.md":    {Data: []byte("## Setup\n[up](../README.md#top) [out](../../x.md) [root](/DESIGN.md#layout) [go](../main.go#L3)\n")},
		"examples/main.go": {Data: []byte("package main\n")},
		"main.go":          {Data: []byte("package main\n")},
	}
	got, err := checkLinks(fsys, []string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:4: broken link #nope: no heading of README.md has the anchor #nope",
		"README.md:5: broken link docs/gone.md: no file docs/gone.md",
		"README.md:5: broken link DESIGN.md#Layout: no heading of DESIGN.md has the anchor #Layout",
		"docs/guide.md:2: broken link ../../x.md: it leaves the repository",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("checkLinks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckMap(t *testing.T) {
	design := "# D\n\n## Layout\n\n| File | What |\n|---|---|\n| `a.go`, `b.go` | x |\n| `sub/c.go` | y |\n| `gone.go` | z |\n\n" +
		"Beside it: `cmd/tool` (with `internal/ui`), `examples`.\n\n## Next\n\n`d.go` `internal/web`\n"
	fsys := fstest.MapFS{
		"DESIGN.md":                       {Data: []byte(design)},
		"go.mod":                          {},
		"a.go":                            {},
		"b.go":                            {},
		"a_test.go":                       {},
		"d.go":                            {},
		"sub/c.go":                        {},
		"sub/e.go":                        {},
		"testdata/t.go":                   {},
		".ci/x.go":                        {},
		"cmd/tool/go.mod":                 {},
		"cmd/tool/main.go":                {},
		"cmd/tool/internal/ui/ui.go":      {},
		"cmd/tool/internal/web/web.go":    {},
		"cmd/tool/internal/web/w_test.go": {},
		"examples/go.mod":                 {},
		"examples/x/main.go":              {},
		"tests/go.mod":                    {},
	}
	got, err := checkMap(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"DESIGN.md (## Layout): `d.go` is not named",
		"DESIGN.md (## Layout): `sub/e.go` is not named",
		"DESIGN.md (## Layout): the module `tests` is not named",
		"DESIGN.md (## Layout): the package `internal/web` (cmd/tool/internal/web) is not named",
		"DESIGN.md (## Layout): `gone.go` is named but does not exist",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("checkMap =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
