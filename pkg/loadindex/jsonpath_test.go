package loadindex

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func TestExtractValue(t *testing.T) {
	tests := []struct {
		doc, path string
		want      float64
		wantErr   error
	}{
		{doc: `{"a":{"b":1.5}}`, path: "a.b", want: 1.5},
		{doc: `{"a":[0,{"b":"7"}]}`, path: "a.1.b", want: 7},
		{doc: `{"a.b":1}`, path: "a.b", wantErr: ErrMissingField},
		{doc: `{"a.b":1}`, path: `a\.b`, want: 1},
		{doc: `{"gpu":{"util.avg":"0.25"}}`, path: `gpu.util\.avg`, want: 0.25},
		{doc: `{"a":{"0":4}}`, path: "a.0", want: 4},
		{doc: `{"job:load":{"x-y_z":2}}`, path: "job:load.x-y_z", want: 2},
		{doc: `{"a":1,"a":2}`, path: "a", want: 1},
		{doc: `{"a":[1]}`, path: "a.1", wantErr: ErrMissingField},
		{doc: `{"a":[1]}`, path: "a.-1", wantErr: ErrMissingField},
		{doc: `{"a":[1,2]}`, path: "a.01", wantErr: ErrMissingField},
		{doc: `{"a":[1]}`, path: "a.x", wantErr: ErrMissingField},
		{doc: `{"a":1}`, path: "a.b", wantErr: ErrMissingField},
		{doc: `{"a":{}}`, path: "a", wantErr: ErrNotNumber},
		{doc: `{"a":""}`, path: "a", wantErr: ErrNotNumber},
		{doc: `{"a":"1e999"}`, path: "a", wantErr: ErrInf},
		{doc: `{"a":"-0"}`, path: "a", want: 0},
		{doc: ``, path: "a", wantErr: ErrBadJSON},
		{doc: `{"a":1}{}`, path: "a", wantErr: ErrBadJSON},
	}
	for _, tt := range tests {
		t.Run(tt.doc+"@"+tt.path, func(t *testing.T) {
			got, err := ExtractValue([]byte(tt.doc), tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// FuzzExtractValue checks that any document and path either yield a finite,
// non-negative value or a clear error, and never panic. The seeds run as a
// plain test too.
func FuzzExtractValue(f *testing.F) {
	seeds := []struct{ doc, path string }{
		{`{"data":{"load_balance":0.83}}`, "data.load_balance"},
		{`{"data":{"items":[{"v":1},{"v":"2"}]}}`, "data.items.1.v"},
		{`{"data":{"items":[]}}`, "data.items.0"},
		{`[1,[2,[3]]]`, "1.1.0"},
		{`{"a":"NaN"}`, "a"},
		{`{"a":-1}`, "a"},
		{`{"a":1e400}`, "a"},
		{`{"a":`, "a"},
		{`null`, "a"},
		{`{"":1}`, ""},
		{`{"a":{"b":true}}`, "a..b"},
		{`{"a":[1]}`, "a.99999999999999999999"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.doc), s.path)
	}
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		v, err := ExtractValue(doc, path)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("ExtractValue(%q, %q) = %v without error", doc, path, v)
		}
	})
}

// BenchmarkExtractValue measures parsing a typical small answer. Target:
// well under 50µs, so that reading hundreds of sets per interval costs
// nothing next to the network round trips.
func BenchmarkExtractValue(b *testing.B) {
	doc := []byte(`{"code":0,"msg":"ok","data":{"load_balance":0.83,"items":[{"v":1},{"v":2}],"host":"gpu-01"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ExtractValue(doc, "data.load_balance"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckPath(t *testing.T) {
	for path, ok := range map[string]bool{
		"data.load_balance": true,
		"a.0.b":             true,
		`a\.b`:              true,
		`a.b\.`:             true,
		"job:load.x-y":      true,
		"":                  false,
		".a":                false,
		"a.":                false,
		"a..b":              false,
		`a\b`:               false,
		"a b":               false,
	} {
		if err := checkPath(path); (err == nil) != ok {
			t.Errorf("checkPath(%q) = %v, want ok=%v", path, err, ok)
		}
	}
}

// TestQueryLanguageRefused: every form of a query language (filters,
// modifiers, pipes, multipaths, wildcards, literals, JSON lines) is refused
// before any document is read, so that no value read can depend on a string
// of the answer. Each is also tried against a document where, as a query,
// it would have found a number.
func TestQueryLanguageRefused(t *testing.T) {
	doc := []byte(`{"SecretAccessKey":"kZ9x","items":[{"n":"a","v":1},{"n":"b","v":2}],"a":{"b":3},"ab":4}`)
	for _, path := range []string{
		`[@this].#(SecretAccessKey>="kZ9")#|#`,
		`#(SecretAccessKey>="kZ9")#`,
		`items.#(n=="b").v`,
		`items.#(..)`,
		`items.#(v>1)#.v`,
		`items.#`,
		`items.#.v`,
		`@this`,
		`a.@reverse`,
		`@keys`,
		`a|b`,
		`items|0`,
		`{a,b}`,
		`[a.b,ab]`,
		`a*`,
		`a?`,
		`*.b`,
		`!true`,
		`..0`,
		`a.b~true`,
		`a.b=3`,
		`"a"`,
		`$.a.b`,
		`a[0]`,
		`a%b`,
		"a\n.b",
	} {
		t.Run(path, func(t *testing.T) {
			if err := checkPath(path); err == nil {
				t.Fatalf("checkPath(%q) accepted a query", path)
			}
			if v, err := ExtractValue(doc, path); err == nil {
				t.Fatalf("ExtractValue(%q) = %v, want refused", path, v)
			}
			src, err := New(context.Background(), httpMetric("http://x", func(h *gputaskv1.HTTPSource) { h.ValueLocation = path }), "ns", nil)
			if err == nil || !strings.Contains(err.Error(), "http.valueLocation") {
				t.Fatalf("New = %v, %v; want a valueLocation error (InvalidMetricSpec)", src, err)
			}
			if Class(err) != ClassInvalidMetricSpec {
				t.Errorf("Class = %s, want %s", Class(err), ClassInvalidMetricSpec)
			}
		})
	}
}

// TestValueLocationPatternMatchesCRD: the CRD's pattern on
// http.valueLocation is the one checked at read time.
func TestValueLocationPatternMatchesCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "crds", "gputask.io_gputasksets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// YAML keeps backslashes of a plain or single-quoted scalar as they are.
	var found bool
	for _, form := range []string{ValueLocationPattern, "'" + ValueLocationPattern + "'", strconv.Quote(ValueLocationPattern)} {
		found = found || strings.Contains(string(raw), "pattern: "+form+"\n")
	}
	if !found {
		t.Errorf("the GPUTaskSet CRD has no pattern %s", ValueLocationPattern)
	}
}
