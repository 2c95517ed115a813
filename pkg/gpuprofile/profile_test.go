package gpuprofile

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustLookup(t *testing.T, name string) *Profile {
	t.Helper()
	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Every measured point comes back exactly, on both embedded profiles.
func TestITLAtMeasuredPoints(t *testing.T) {
	for _, name := range []string{"h100-llama-3.1-8b", "h200-llama-3.1-8b"} {
		p := mustLookup(t, name)
		if len(p.Decode) != 17 {
			t.Fatalf("%s: %d decode points, want the 17 measured", name, len(p.Decode))
		}
		for _, d := range p.Decode {
			if got := p.ITLSeconds(d.Batch, float64(d.Context)) * 1e3; !near(got, d.ITLMsMedian) {
				t.Errorf("%s: ITL(%d, %d) = %.4f ms, want the measured %.4f", name, d.Batch, d.Context, got, d.ITLMsMedian)
			}
		}
	}
}

// Between and beyond the measured points, by hand from the H100 table.
func TestITLInterpolates(t *testing.T) {
	p := mustLookup(t, "h100-llama-3.1-8b")
	slope16k := (17.981 - 13.261) / 12 // ms per sequence, context 16,384, batches 4 to 16
	at16k := func(b float64) float64 { return 17.981 + (b-16)*slope16k }
	for _, tc := range []struct {
		name    string
		batch   int
		context float64
		wantMs  float64
	}{
		{"between batches", 48, 1024, (8.277 + 9.836) / 2},
		{"between batches, sparse row", 8, 4096, 8.303 + (9.681-8.303)*4/12},
		{"between contexts", 4, 2560, (7.113 + 8.303) / 2},
		{"beyond the last batch", 512, 1024, 20.095 + (20.095-13.219)*2},
		// Context 16,384 was measured up to batch 16 only: its value at
		// batch 32 is extrapolated along that row, then joined to
		// context 4,096's measured 12.454 ms.
		{"sparse grid", 32, 10240, (12.454 + at16k(32)) / 2},
		{"beyond the last context", 1, 28672, 13.258 + (13.258-8.315)*(12288.0/12288)},
		{"below the first context", 1, 0, 7.026 - (8.315-7.026)/3},
	} {
		if got := p.ITLSeconds(tc.batch, tc.context) * 1e3; !near(got, tc.wantMs) {
			t.Errorf("%s: ITL(%d, %.0f) = %.4f ms, want %.4f", tc.name, tc.batch, tc.context, got, tc.wantMs)
		}
	}
	if got := p.ITL(256, 1024); got.Microseconds() != 20095 {
		t.Errorf("ITL(256, 1024) = %v, want 20.095ms", got)
	}
}

// Segment gives the linear piece an engine model sums along: its ends are
// the measured contexts, and it agrees with At inside.
func TestSegment(t *testing.T) {
	p := mustLookup(t, "h100-llama-3.1-8b")
	l := p.Line(64)
	for _, tc := range []struct {
		c      float64
		lo, hi float64
	}{
		{0, math.Inf(-1), 4096},
		{1024, math.Inf(-1), 4096},
		{4095.5, math.Inf(-1), 4096},
		{4096, 4096, math.Inf(1)},
		{100000, 4096, math.Inf(1)},
	} {
		a, s, lo, hi := l.Segment(tc.c)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("Segment(%v) = [%v, %v), want [%v, %v)", tc.c, lo, hi, tc.lo, tc.hi)
		}
		if !near(a+s*tc.c, l.At(tc.c)) {
			t.Errorf("Segment(%v) gives %v, At %v", tc.c, a+s*tc.c, l.At(tc.c))
		}
	}
	// Three measured contexts make two pieces, joined at 4,096: the value
	// is continuous there.
	a0, s0, _, _ := l.Segment(4095)
	a1, s1, _, _ := l.Segment(4096)
	if !near(a0+s0*4096, a1+s1*4096) {
		t.Errorf("the pieces disagree at 4096: %v and %v", a0+s0*4096, a1+s1*4096)
	}
}

func TestPrefillTokensPerSecond(t *testing.T) {
	p := mustLookup(t, "h100-llama-3.1-8b")
	// Every prompt token of the table over its total time.
	tokens := 512.0 + 2048 + 8192 + 4*2048 + 16*2048
	ms := 13.95 + 51.2 + 230.71 + 210.9 + 843.49
	if got, want := p.PrefillTokensPerSecond(), tokens/ms*1e3; !near(got, want) {
		t.Errorf("prefill = %.1f tokens/s, want %.1f", got, want)
	}
	if p.KVTokensFit != 465567 || p.KVBytesPerToken != 131072 {
		t.Errorf("KV = %d tokens of %d bytes, want 465567 of 131072", p.KVTokensFit, p.KVBytesPerToken)
	}
	h200 := mustLookup(t, "h200-llama-3.1-8b")
	if h200.KVTokensFit != 912521 || !strings.Contains(h200.GPU, "H200") {
		t.Errorf("h200: %s with %d KV tokens", h200.GPU, h200.KVTokensFit)
	}
}

// The capacity at an ITL target, by hand from the H100 table: at 20 ms,
// 254 sequences of 1,024 tokens (between 128 and 256, 13.219 ms + 6.876
// ms × 126/128; 255 take 20.04 ms); at 4,096 tokens the
// batch extrapolates from 32 and 64 (12.454 and 18.124 ms) to 74; at
// 16,384 the KV cache (465,567 tokens) holds 28 before the ITL limits.
func TestMaxBatchWithin(t *testing.T) {
	p := mustLookup(t, "h100-llama-3.1-8b")
	slope4k := (18.124 - 12.454) / 32
	for _, tc := range []struct {
		itl     time.Duration
		context float64
		want    int
	}{
		{20 * time.Millisecond, 1024, 254},
		{20095 * time.Microsecond, 1024, 256},
		{20 * time.Millisecond, 4096, 64 + int((20-18.124)/slope4k)},
		{40 * time.Millisecond, 16384, 465567 / 16384},
		{5 * time.Millisecond, 1024, 0},
	} {
		if got := p.MaxBatchWithin(tc.itl, tc.context); got != tc.want {
			t.Errorf("MaxBatchWithin(%v, %.0f) = %d, want %d", tc.itl, tc.context, got, tc.want)
		}
	}
	if got, want := p.DecodeTokensPerSecond(256, 1024), 256/0.020095; !near(got, want) {
		t.Errorf("DecodeTokensPerSecond(256, 1024) = %v, want %v", got, want)
	}
}

func TestLookupAndLoad(t *testing.T) {
	if got := Names(); strings.Join(got, ",") != "h100-llama-3.1-8b,h200-llama-3.1-8b" {
		t.Errorf("Names() = %v", got)
	}
	if _, err := Lookup("a100"); err == nil || !strings.Contains(err.Error(), "h100-llama-3.1-8b") {
		t.Errorf("Lookup of an unknown name: %v, want an error listing the known ones", err)
	}
	data, err := embedded.ReadFile("profiles/h200-llama-3.1-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpu.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, "h200-llama-3.1-8b"} {
		p, err := LoadOrLookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != name || p.ITL(1, 1024).Microseconds() != 5489 {
			t.Errorf("LoadOrLookup(%s): %s with ITL(1, 1024) %v", name, p.Name, p.ITL(1, 1024))
		}
	}
	if _, err := LoadOrLookup(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

// A malformed profile is refused with the field at fault.
func TestParseRefuses(t *testing.T) {
	base := func() map[string]any {
		var m map[string]any
		data, _ := embedded.ReadFile("profiles/h100-llama-3.1-8b.json")
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	decode := func(m map[string]any, i int) map[string]any { return m["decode"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name  string
		edit  func(m map[string]any)
		field string
	}{
		{"no decode", func(m map[string]any) { delete(m, "decode") }, "decode: no measured points"},
		{"zero batch", func(m map[string]any) { decode(m, 3)["batch"] = 0 }, "decode[3].batch"},
		{"zero context", func(m map[string]any) { decode(m, 2)["context"] = 0 }, "decode[2].context"},
		{"missing ITL", func(m map[string]any) { delete(decode(m, 5), "itl_ms_median") }, "decode[5].itl_ms_median"},
		{"negative ITL", func(m map[string]any) { decode(m, 5)["itl_ms_median"] = -1 }, "decode[5].itl_ms_median"},
		{"duplicate point", func(m map[string]any) { decode(m, 1)["batch"] = 1 }, "decode[1]: batch 1 at context 1024 is measured twice"},
		{"no prefill", func(m map[string]any) { m["prefill"] = []any{} }, "prefill: no measured points"},
		{"prefill time", func(m map[string]any) { m["prefill"].([]any)[2].(map[string]any)["ms"] = 0 }, "prefill[2].ms"},
		{"prefill prompt", func(m map[string]any) { m["prefill"].([]any)[0].(map[string]any)["prompt"] = 0 }, "prefill[0].prompt"},
		{"KV tokens", func(m map[string]any) { delete(m, "kv_tokens_fit") }, "kv_tokens_fit"},
		{"KV bytes", func(m map[string]any) { m["kv_bytes_per_token"] = 0 }, "kv_bytes_per_token"},
		{"wrong type", func(m map[string]any) { m["kv_tokens_fit"] = "many" }, "kv_tokens_fit"},
		// A row whose ITL falls with the batch extrapolates below zero.
		{"falling row", func(m map[string]any) { decode(m, 8)["itl_ms_median"] = 1 }, "extrapolated to batch"},
	} {
		m := base()
		tc.edit(m)
		data, _ := json.Marshal(m)
		_, err := Parse(data)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Parse error %v, want one naming %q", tc.name, err, tc.field)
		}
	}
	if _, err := Parse(mustJSON(base())); err != nil {
		t.Errorf("the unedited profile: %v", err)
	}
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
