// Command docscheck checks the repository's documentation against its tree.
// Run from the root:
//
//	go run ./.ci/docscheck [map] [links]
//
// map: DESIGN.md's map (its "## Layout" section) names every non-test .go
// file of the root module's packages (a root file as `file.go`, another as
// `dir/file.go`), every module of the workspace, and every package of the
// modules beside the library (examples and tests aside, named as wholes); and
// every .go file it names exists (designmap.go).
//
// links: every relative link or image of every tracked Markdown file names a
// file that exists, and its #anchor a heading of that file (links.go).
//
// With no argument it runs both. It prints each problem and exits 1 if any.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func main() {
	checks := os.Args[1:]
	if len(checks) == 0 {
		checks = []string{"map", "links"}
	}
	failed := false
	for _, c := range checks {
		problems, err := run(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "docscheck %s: %v\n", c, err)
			os.Exit(2)
		}
		for _, p := range problems {
			fmt.Println(p)
		}
		if len(problems) > 0 {
			fmt.Printf("docscheck %s: %d problem(s); %s\n", c, len(problems), advice[c])
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

var advice = map[string]string{
	"map":   "complete DESIGN.md's map (## Layout): one row per file saying what it holds",
	"links": "fix each link's path (relative to its file) or #anchor (a heading's GitHub slug)",
}

func run(check string) ([]string, error) {
	fsys := os.DirFS(".")
	switch check {
	case "map":
		return checkMap(fsys)
	case "links":
		files, err := trackedMarkdown()
		if err != nil {
			return nil, err
		}
		return checkLinks(fsys, files)
	}
	return nil, fmt.Errorf("unknown check %q (want map or links)", check)
}

// trackedMarkdown returns git ls-files '*.md': the Markdown a clone holds.
func trackedMarkdown() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "-z", "--", "*.md").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if s := strings.TrimSpace(string(f)); s != "" {
			files = append(files, s)
		}
	}
	return files, nil
}
