package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin := func() (string, error) { return "from-stdin", nil }
	for _, tc := range []struct {
		name   string
		file   string
		env    string
		envSet bool
		want   string
	}{
		{"file wins", file, "from-env", true, "from-file"},
		{"env", "", "from-env", true, "from-env"},
		{"empty env is a password", "", "", true, ""},
		{"stdin", "", "", false, "from-stdin"},
		{"dash is stdin", "-", "from-env", true, "from-stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findPassword(tc.file, tc.env, tc.envSet, stdin)
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := findPassword(filepath.Join(t.TempDir(), "missing"), "", false, stdin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestReadLineStopsAtNewline(t *testing.T) {
	r := strings.NewReader("secret\r\nrest of stdin")
	got, err := readLine(r)
	if err != nil || got != "secret" {
		t.Fatalf("got %q, %v", got, err)
	}
	if rest, _ := readLine(r); rest != "rest of stdin" {
		t.Errorf("readLine consumed past the newline: rest %q", rest)
	}
}
