package main

// This file holds the map check: DESIGN.md's "## Layout" section against
// the Go files of the tree. The root module (go list ./... at the root: the
// library, internal/shardmodel, internal/testhook, lockmetrics) is mapped
// file by file; the other modules of go.work by module, and by package
// except examples and tests, which the map describes as wholes.

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

const (
	designFile = "DESIGN.md"
	mapHeading = "## Layout"
)

// wholeModules are the modules whose packages the map need not name one by
// one (with everything under them).
var wholeModules = []string{"examples", "tests"}

// goDir is a directory holding non-test .go files, and its module's root.
type goDir struct {
	dir, module string
	files       []string
}

func checkMap(fsys fs.FS) ([]string, error) {
	md, err := fs.ReadFile(fsys, designFile)
	if err != nil {
		return nil, err
	}
	section, ok := mapSection(string(md))
	if !ok {
		return nil, fmt.Errorf("%s has no %q section", designFile, mapHeading)
	}
	dirs, modules, err := goSources(fsys)
	if err != nil {
		return nil, err
	}
	named := backquoted(section)
	problems := mapMissing(named, dirs, modules)
	return append(problems, mapStale(fsys, named)...), nil
}

// mapSection returns the text of md's map: from its heading up to the next
// heading of level 1 or 2.
func mapSection(md string) (string, bool) {
	lines := strings.Split(blankFences(md), "\n")
	start := -1
	for i, l := range lines {
		t := strings.TrimRight(l, " \t")
		switch {
		case t == mapHeading && start < 0:
			start = i + 1
		case start >= 0 && (strings.HasPrefix(t, "# ") || strings.HasPrefix(t, "## ")):
			return strings.Join(lines[start:i], "\n"), true
		}
	}
	if start < 0 {
		return "", false
	}
	return strings.Join(lines[start:], "\n"), true
}

var backquote = regexp.MustCompile("`([^`\n]+)`")

// backquoted returns the set of text's backquoted spans.
func backquoted(text string) map[string]bool {
	named := map[string]bool{}
	for _, m := range backquote.FindAllStringSubmatch(text, -1) {
		named[strings.TrimSpace(m[1])] = true
	}
	return named
}

// goSources returns the directories of fsys that hold non-test .go files,
// each with its module (the nearest directory with a go.mod), and the
// modules' roots. Hidden directories, _ and testdata are not Go's.
func goSources(fsys fs.FS) ([]goDir, []string, error) {
	var dirs []goDir
	var modules []string
	byDir := map[string]int{}
	moduleOf := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return fs.SkipDir
			}
			moduleOf[p] = moduleOf[path.Dir(p)]
			if _, err := fs.Stat(fsys, path.Join(p, "go.mod")); err == nil {
				moduleOf[p] = p
				modules = append(modules, p)
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		dir := path.Dir(p)
		i, ok := byDir[dir]
		if !ok {
			i = len(dirs)
			byDir[dir] = i
			dirs = append(dirs, goDir{dir: dir, module: moduleOf[dir]})
		}
		dirs[i].files = append(dirs[i].files, name)
		return nil
	})
	return dirs, modules, err
}

// mapMissing returns what the map (its backquoted spans, named) leaves out.
func mapMissing(named map[string]bool, dirs []goDir, modules []string) []string {
	var problems []string
	miss := func(what string) {
		problems = append(problems, fmt.Sprintf("%s (%s): %s is not named", designFile, mapHeading, what))
	}
	for _, m := range modules {
		if m != "." && !named[m] {
			miss(fmt.Sprintf("the module `%s`", m))
		}
	}
	for _, d := range dirs {
		switch {
		case d.module == ".":
			for _, f := range d.files {
				if want := path.Join(d.dir, f); !named[want] {
					miss(fmt.Sprintf("`%s`", want))
				}
			}
		case d.dir == d.module || under(d.module, wholeModules):
		default:
			rel := strings.TrimPrefix(d.dir, d.module+"/")
			if !named[rel] && !named[d.dir] {
				miss(fmt.Sprintf("the package `%s` (%s)", rel, d.dir))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// under reports whether p is one of roots or inside one.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

var goFileName = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.go$`)

// mapStale returns the .go files the map names that do not exist: a file
// renamed or removed since the map was written.
func mapStale(fsys fs.FS, named map[string]bool) []string {
	var problems []string
	for n := range named {
		if !goFileName.MatchString(n) {
			continue
		}
		if _, err := fs.Stat(fsys, path.Clean(n)); err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s): `%s` is named but does not exist", designFile, mapHeading, n))
		}
	}
	sort.Strings(problems)
	return problems
}
