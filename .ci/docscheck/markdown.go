package main

// This file holds the little of Markdown the checks need: what is code (to
// be blanked out, keeping every line where it was), and headings with
// GitHub's anchors for them.

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var fenceOpen = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})(.*)$")

// blankFences returns md with the lines of its fenced code blocks, fences
// included, emptied. A fence may be indented (it may sit in a list item).
func blankFences(md string) string {
	lines := strings.Split(md, "\n")
	fence := ""
	for i, l := range lines {
		switch {
		case fence != "":
			if t := strings.TrimSpace(l); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
		default:
			m := fenceOpen.FindStringSubmatch(l)
			if m == nil || (m[1][0] == '`' && strings.Contains(m[2], "`")) {
				continue
			}
			fence = m[1]
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// blankComments returns md with its HTML comments blanked out.
func blankComments(md string) string {
	b := []byte(md)
	for i := 0; ; {
		j := strings.Index(md[i:], "<!--")
		if j < 0 {
			break
		}
		k := strings.Index(md[i+j:], "-->")
		if k < 0 {
			k = len(md) - i - j - 3
		}
		blank(b, i+j, i+j+k+3)
		i += j + k + 3
	}
	return string(b)
}

// blankCodeSpans returns md with its inline code spans, backquotes and
// content, blanked out. A span ends at the next run of as many backquotes
// in the same paragraph; a run without one is literal.
func blankCodeSpans(md string) string {
	b := []byte(md)
	for i := 0; i < len(md); {
		if md[i] == '\\' {
			i += 2
			continue
		}
		if md[i] != '`' {
			i++
			continue
		}
		n := runOf(md, i, '`')
		end := closingRun(md, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		blank(b, i, end+n)
		i = end + n
	}
	return string(b)
}

// closingRun returns where a run of exactly n backquotes starts at or after
// i, before the paragraph ends; -1 if none.
func closingRun(md string, i, n int) int {
	for i < len(md) {
		switch {
		case md[i] == '`':
			m := runOf(md, i, '`')
			if m == n {
				return i
			}
			i += m
		case md[i] == '\n' && strings.TrimSpace(md[i+1:lineEnd(md, i+1)]) == "":
			return -1
		default:
			i++
		}
	}
	return -1
}

func lineEnd(md string, i int) int {
	if k := strings.IndexByte(md[i:], '\n'); k >= 0 {
		return i + k
	}
	return len(md)
}

func runOf(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// blank replaces b[from:to] with spaces, keeping line endings.
func blank(b []byte, from, to int) {
	for k := from; k < to && k < len(b); k++ {
		if b[k] != '\n' {
			b[k] = ' '
		}
	}
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	notSetext  = regexp.MustCompile(`^\s*([-*+>|#]|\d+[.)])(\s|$)`)
	htmlID     = regexp.MustCompile(`<[A-Za-z][^>]*\s(?:id|name)="([^"]+)"`)
)

// headings returns the text of md's headings, ATX (# Title) and setext
// (Title over === or ---), in order.
func headings(md string) []string {
	lines := strings.Split(blankComments(blankFences(md)), "\n")
	var hs []string
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			hs = append(hs, m[1])
			continue
		}
		if i > 0 && setextLine.MatchString(l) {
			prev := lines[i-1]
			if strings.TrimSpace(prev) != "" && !notSetext.MatchString(prev) && !setextLine.MatchString(prev) {
				hs = append(hs, strings.TrimSpace(prev))
			}
		}
	}
	return hs
}

// headingAnchors returns the anchors GitHub gives md's headings, and the ids
// and names of its HTML elements.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	s := slugger{}
	for _, h := range headings(md) {
		anchors[s.slug(h)] = true
	}
	for _, m := range htmlID.FindAllStringSubmatch(blankFences(md), -1) {
		anchors[m[1]] = true
	}
	return anchors
}

var (
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`</?[A-Za-z][^>]*>`)
)

// slugger gives GitHub's anchors (github-slugger's): a heading's text,
// lowercased, without what is neither a letter, a digit, '-', '_' nor a
// space, spaces made '-'; a second heading with the same slug gets "-1", a
// third "-2".
type slugger map[string]int

func (s slugger) slug(heading string) string {
	base := slug(heading)
	result := base
	for {
		if _, taken := s[result]; !taken {
			break
		}
		s[base]++
		result = base + "-" + strconv.Itoa(s[base])
	}
	s[result] = 0
	return result
}

// slug is a heading's anchor before duplicates are told apart. The heading
// is read as rendered: links give their text, backquotes and tags go.
func slug(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
