package ui

import (
	"io"
	"strings"
	"testing"
)

// TestPageWithoutScript: the page's HTML says something before (and
// without) its script: a <noscript> that points to the commands that show
// the same, and a table that is not empty.
func TestPageWithoutScript(t *testing.T) {
	_, hs := startUI(t, cluster.TestClient(t), Config{Prefix: uniquePrefix(t)})
	resp, err := hs.Client().Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	var noscript string // every <noscript>'s content
	for rest, ok := page, true; ok; {
		var in string
		if _, in, ok = strings.Cut(rest, "<noscript>"); ok {
			in, rest, _ = strings.Cut(in, "</noscript>")
			noscript += in
		}
	}
	for _, want := range []string{"JavaScript", "etcdlock status", "etcdlock ls"} {
		if !strings.Contains(noscript, want) {
			t.Errorf("<noscript> does not mention %q: %s", want, noscript)
		}
	}
	_, tbody, _ := strings.Cut(page, "<tbody>")
	tbody, _, _ = strings.Cut(tbody, "</tbody>")
	if !strings.Contains(tbody, "<td") || !strings.Contains(strings.ToLower(tbody), "loading") {
		t.Errorf("the table's body says nothing before the script runs: %q", tbody)
	}
}
