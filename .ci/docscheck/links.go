package main

// This file holds the link check: every relative link or image of the
// Markdown files names a file that exists (relative to the linking file's
// directory; "/x" is relative to the repository's root, as on GitHub), and
// its #anchor, when the target is Markdown, a heading of that file (a bare
// #anchor, of the same file). Links in fenced code, inline code and HTML
// comments are not links.

import (
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
)

// link is a link's target and the line it is on (1-based).
type link struct {
	line   int
	target string
}

func checkLinks(fsys fs.FS, files []string) ([]string, error) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		text, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		anchors[p] = headingAnchors(string(text))
		return anchors[p], nil
	}
	var problems []string
	for _, f := range files {
		text, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		for _, l := range extractLinks(string(text)) {
			if why := checkTarget(fsys, f, l.target, anchorsOf); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: broken link %s: %s", f, l.line, l.target, why))
			}
		}
	}
	return problems, nil
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkTarget says what is wrong with target, linked from the file from;
// "" if nothing is, or if target is not relative.
func checkTarget(fsys fs.FS, from, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	p, frag, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	resolved := resolve(from, p)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return "it leaves the repository"
	}
	info, err := fs.Stat(fsys, resolved)
	if err != nil {
		return fmt.Sprintf("no file %s", resolved)
	}
	if frag == "" || info.IsDir() || !strings.HasSuffix(strings.ToLower(resolved), ".md") {
		return ""
	}
	if u, err := url.PathUnescape(frag); err == nil {
		frag = u
	}
	a, err := anchorsOf(resolved)
	if err != nil {
		return err.Error()
	}
	if !a[frag] {
		return fmt.Sprintf("no heading of %s has the anchor #%s", resolved, frag)
	}
	return ""
}

// resolve returns the path p names in a link from the file from: from
// itself if p is empty, relative to the root if p starts with '/'.
func resolve(from, p string) string {
	switch {
	case p == "":
		return from
	case strings.HasPrefix(p, "/"):
		return path.Clean(strings.TrimLeft(p, "/"))
	}
	return path.Join(path.Dir(from), p)
}

// extractLinks returns the targets of md's links and images: inline ones,
// [text](target "title") and ![alt](target), and reference definitions,
// [label]: target.
func extractLinks(md string) []link {
	text := blankCodeSpans(blankComments(blankFences(md)))
	lineAt := lineIndex(text)
	var links []link
	for i := 0; ; {
		j := strings.Index(text[i:], "](")
		if j < 0 {
			break
		}
		close := i + j
		i = close + 2
		if !openedBracket(text, close) {
			continue
		}
		if target, start, ok := destination(text, close+2); ok && target != "" {
			links = append(links, link{lineAt(start), target})
		}
	}
	for _, m := range refDefinition.FindAllStringSubmatchIndex(text, -1) {
		target := strings.TrimSuffix(strings.TrimPrefix(text[m[2]:m[3]], "<"), ">")
		links = append(links, link{lineAt(m[2]), target})
	}
	sort.SliceStable(links, func(a, b int) bool { return links[a].line < links[b].line })
	return links
}

var refDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)`)

// lineIndex returns a function from a byte offset of text to its line.
func lineIndex(text string) func(int) int {
	var starts []int
	for i, c := range text {
		if c == '\n' {
			starts = append(starts, i)
		}
	}
	return func(off int) int { return sort.SearchInts(starts, off) + 1 }
}

// openedBracket reports whether the ']' at text[close] closes a '[' of the
// same paragraph (brackets between them balanced).
func openedBracket(text string, close int) bool {
	depth := 0
	for i := close - 1; i >= 0; i-- {
		switch {
		case text[i] == '\n' && i > 0 && strings.TrimSpace(text[lineStart(text, i-1):i]) == "":
			return false
		case escaped(text, i):
		case text[i] == ']':
			depth++
		case text[i] == '[' && depth == 0:
			return true
		case text[i] == '[':
			depth--
		}
	}
	return false
}

func lineStart(text string, i int) int { return strings.LastIndexByte(text[:i+1], '\n') + 1 }

// escaped reports whether text[i] follows an odd run of backslashes.
func escaped(text string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && text[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// destination parses a link's destination and title at text[i:], just
// after its "](", up to the closing ')'. It returns the destination and
// where it starts; ok is false if what follows is no link.
func destination(text string, i int) (target string, start int, ok bool) {
	i = skipSpace(text, i)
	start = i
	end := i
	if i < len(text) && text[i] == '<' {
		end = strings.IndexAny(text[i:], ">\n")
		if end < 0 || text[i+end] != '>' {
			return "", 0, false
		}
		target, i = text[i+1:i+end], i+end+1
	} else {
		end = destinationEnd(text, i)
		target, i = text[i:end], end
	}
	i = skipSpace(text, i)
	if i < len(text) && strings.IndexByte(`"'(`, text[i]) >= 0 {
		closer := map[byte]byte{'"': '"', '\'': '\'', '(': ')'}[text[i]]
		k := strings.IndexByte(text[i+1:], closer)
		if k < 0 {
			return "", 0, false
		}
		i = skipSpace(text, i+1+k+1)
	}
	if i >= len(text) || text[i] != ')' {
		return "", 0, false
	}
	return target, start, true
}

// destinationEnd returns the end of a bare destination starting at i: the
// first space or control character, or an unbalanced ')'.
func destinationEnd(text string, i int) int {
	depth := 0
	for ; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '\\' && i+1 < len(text):
			i++
		case c <= ' ':
			return i
		case c == '(':
			depth++
		case c == ')' && depth == 0:
			return i
		case c == ')':
			depth--
		}
	}
	return i
}

// skipSpace skips spaces, tabs and at most one line ending.
func skipSpace(text string, i int) int {
	nl := false
	for ; i < len(text); i++ {
		switch c := text[i]; {
		case c == ' ' || c == '\t':
		case c == '\n' && !nl:
			nl = true
		default:
			return i
		}
	}
	return i
}
