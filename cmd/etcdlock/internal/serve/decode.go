package serve

// This file holds the request body's parser: strict, so that what serve
// acts on is what a proxy or a log that reads the same JSON sees.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"
)

// maxBody caps a request body.
const maxBody = 64 << 10

// decode reads r's JSON body into v, a pointer to a struct: at most maxBody
// bytes, one object. It answers codeInvalidArgument for anything else, and
// for a key that is not one of v's fields' JSON names exactly (Go's decoder
// alone would take "NAME" for "name"), or that comes twice (it would keep
// the last). It reads the body to its end, so that the server watches the
// connection from then on and a client that goes ends the request's
// context.
func (srv *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	// A body that stops midway holds the request no longer than
	// BodyTimeout. The deadline is lifted once the body is in, for the
	// stream's reads; after a failed read it stays, so that the server's
	// drain of the rest fails as fast and the connection closes.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(orDefault(srv.cfg.BodyTimeout, defaultBodyTimeout)))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
		w.Header().Del("Connection") // read to its end: the connection may serve more (see ServeHTTP)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(codeInvalidArgument, "request body over %d bytes", maxBody)
		}
		return errorf(codeInvalidArgument, "reading the body: %v", err)
	}
	if err := checkKeys(body, fieldNames(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(codeInvalidArgument, "bad JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(codeInvalidArgument, "bad JSON body: more than one value")
	}
	return nil
}

// checkKeys checks that body is a JSON object with each key once and only
// keys in names (exactly, case included). Other malformations are left to
// the decoder, which reports them.
func checkKeys(body []byte, names map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errorf(codeInvalidArgument, "bad JSON body: want one JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return errorf(codeInvalidArgument, "bad JSON body: key %q given twice", key)
		case !names[key]:
			return errorf(codeInvalidArgument, "bad JSON body: unknown key %q (keys are case-sensitive)", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// fieldNames returns the JSON names of the fields of the struct v points
// to.
func fieldNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}
