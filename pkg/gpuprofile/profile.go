// Package gpuprofile reads measured GPU serving profiles: how long one
// decode step takes for a batch of sequences at a context length, how fast
// a GPU prefills prompts, and how many tokens of KV cache it holds. The
// replay's engine model and the controller's SLO policy both read them, so
// the package is pure: no clients, no replay types.
//
// The format is the one of the JSON files in profiles/ (see
// profiles/README.md for what each field means and how it was measured).
// Two profiles are embedded and found by Lookup:
//
//	h100-llama-3.1-8b  one NVIDIA H100 80GB HBM3 serving a Llama-3.1-8B-shaped decoder in bf16
//	h200-llama-3.1-8b  one NVIDIA H200, the same model
//
// Both were measured on 2026-11-27 with PyTorch 2.11 and CUDA 13 on random
// weights of the model's shapes: each decode step captured in a CUDA graph
// as serving engines run it, over a static KV cache, at contexts 1,024,
// 4,096 and 16,384 and batches up to 256, 64 and 16 respectively; prefill
// as a forward pass over whole prompts.
//
// The decode table is sparse (each context has its own batch range), so
// ITL interpolates in two steps: along batch within each measured context
// (linear between measured batches, extrapolated from the two nearest
// points beyond them), then along context between those values at the
// same batch. For a fixed batch the ITL is therefore piecewise linear in
// the context with knots at the measured contexts, which is what lets an
// engine model sum the latencies of many decode steps in closed form
// (Line).
package gpuprofile

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Profile is one GPU serving one model, as measured.
type Profile struct {
	// Name is how Lookup finds it, or the file it was loaded from.
	Name string `json:"-"`

	GPU         string  `json:"gpu"`
	Torch       string  `json:"torch,omitempty"`
	Params      int64   `json:"params,omitempty"`
	WeightBytes int64   `json:"weight_bytes,omitempty"`
	InitSeconds float64 `json:"init_s,omitempty"`

	// Decode is one decode step per (batch, context).
	Decode []DecodePoint `json:"decode"`
	// Prefill is one forward pass over batch prompts of Prompt tokens.
	Prefill []PrefillPoint `json:"prefill"`

	CopyTBps              float64 `json:"copy_TBps,omitempty"`
	WeightsReadLimitMs    float64 `json:"weights_read_limit_ms,omitempty"`
	FreeBytesAfterWeights int64   `json:"free_bytes_after_weights,omitempty"`
	// KVBytesPerToken is the KV cache one token takes.
	KVBytesPerToken int64 `json:"kv_bytes_per_token"`
	// KVTokensFit is how many tokens of KV cache fit: the engine's
	// admission limit.
	KVTokensFit int64 `json:"kv_tokens_fit"`

	// lines[b] is the ITL of batch b along the context, for b up to
	// MaxBatch; built by Parse.
	lines []Line
	// contexts are the measured contexts, ascending; rows[i] the decode
	// points at contexts[i], by ascending batch.
	contexts []float64
	rows     [][]point
	prefill  float64
}

// DecodePoint is one measured decode step.
type DecodePoint struct {
	Batch   int `json:"batch"`
	Context int `json:"context"`
	// ITLMsMin and ITLMsMedian are the step's time in milliseconds: the
	// inter-token latency every sequence in the batch sees. The median is
	// the one used.
	ITLMsMin    float64 `json:"itl_ms_min,omitempty"`
	ITLMsMedian float64 `json:"itl_ms_median"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
}

// PrefillPoint is one measured prefill.
type PrefillPoint struct {
	Batch      int     `json:"batch"`
	Prompt     int     `json:"prompt"`
	Ms         float64 `json:"ms"`
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
}

// MaxBatch is the largest batch whose ITL line Parse builds and checks;
// larger batches are extrapolated on each call and not checked.
const MaxBatch = 4096

type point struct{ x, y float64 }

//go:embed profiles/*.json
var embedded embed.FS

// Names are the embedded profiles' names, sorted.
func Names() []string {
	entries, _ := embedded.ReadDir("profiles")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// Lookup returns an embedded profile by name, such as h100-llama-3.1-8b.
func Lookup(name string) (*Profile, error) {
	data, err := embedded.ReadFile("profiles/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("no embedded GPU profile %q (have %s)", name, strings.Join(Names(), ", "))
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("embedded GPU profile %s: %w", name, err)
	}
	p.Name = name
	return p, nil
}

// Load reads a profile from a file.
func Load(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.Name = path
	return p, nil
}

// LoadOrLookup reads a profile from a file when name is a path to one,
// else looks it up among the embedded ones: what a --engine FILE|NAME flag
// takes.
func LoadOrLookup(name string) (*Profile, error) {
	if _, err := os.Stat(name); err == nil || strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".json") {
		return Load(name)
	}
	return Lookup(name)
}

// Parse reads and validates a profile. Errors name the field at fault,
// such as decode[3].itl_ms_median.
func Parse(data []byte) (*Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("not a GPU profile: %w", err)
	}
	if err := p.build(); err != nil {
		return nil, err
	}
	return &p, nil
}

func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// build validates the tables and precomputes the ITL lines.
func (p *Profile) build() error {
	if len(p.Decode) == 0 {
		return errors.New("decode: no measured points")
	}
	byContext := map[int][]point{}
	seen := map[[2]int]int{}
	for i, d := range p.Decode {
		switch {
		case d.Batch < 1:
			return fmt.Errorf("decode[%d].batch: %d, want at least 1", i, d.Batch)
		case d.Context < 1:
			return fmt.Errorf("decode[%d].context: %d, want at least 1", i, d.Context)
		case !positive(d.ITLMsMedian):
			return fmt.Errorf("decode[%d].itl_ms_median: %v, want a latency above 0 ms", i, d.ITLMsMedian)
		}
		key := [2]int{d.Batch, d.Context}
		if j, dup := seen[key]; dup {
			return fmt.Errorf("decode[%d]: batch %d at context %d is measured twice (also decode[%d])", i, d.Batch, d.Context, j)
		}
		seen[key] = i
		byContext[d.Context] = append(byContext[d.Context], point{float64(d.Batch), d.ITLMsMedian / 1e3})
	}
	p.contexts, p.rows = nil, nil
	for c := range byContext {
		p.contexts = append(p.contexts, float64(c))
	}
	slices.Sort(p.contexts)
	for _, c := range p.contexts {
		row := byContext[int(c)]
		slices.SortFunc(row, func(a, b point) int { return int(a.x - b.x) })
		p.rows = append(p.rows, row)
	}

	if len(p.Prefill) == 0 {
		return errors.New("prefill: no measured points")
	}
	var tokens, seconds float64
	for i, f := range p.Prefill {
		switch {
		case f.Batch < 1:
			return fmt.Errorf("prefill[%d].batch: %d, want at least 1", i, f.Batch)
		case f.Prompt < 1:
			return fmt.Errorf("prefill[%d].prompt: %d, want at least 1", i, f.Prompt)
		case !positive(f.Ms):
			return fmt.Errorf("prefill[%d].ms: %v, want a time above 0 ms", i, f.Ms)
		}
		tokens += float64(f.Batch * f.Prompt)
		seconds += f.Ms / 1e3
	}
	p.prefill = tokens / seconds

	switch {
	case p.KVBytesPerToken < 1:
		return fmt.Errorf("kv_bytes_per_token: %d, want at least 1", p.KVBytesPerToken)
	case p.KVTokensFit < 1:
		return fmt.Errorf("kv_tokens_fit: %d, want at least 1", p.KVTokensFit)
	}

	p.lines = make([]Line, MaxBatch+1)
	for b := 1; b <= MaxBatch; b++ {
		l := p.line(b)
		// The engine model sums latencies along these lines and inverts
		// the sums, which needs every step to take time wherever an
		// engine can run: b sequences whose mean context is at most the
		// KV cache over b. (Beyond that the extrapolated rows may cross,
		// and no engine goes there.)
		reach := float64(p.KVTokensFit) / float64(b)
		check := []float64{0, reach}
		for _, c := range l.knots {
			if c < reach {
				check = append(check, c)
			}
		}
		for _, c := range check {
			if v := l.At(c); !(v > 0) {
				return fmt.Errorf("decode: the ITL extrapolated to batch %d at context %.0f is %.3g ms; the table must give every batch up to %d a latency above 0 up to the contexts its KV cache holds", b, c, v*1e3, MaxBatch)
			}
		}
		p.lines[b] = l
	}
	return nil
}

// line builds the ITL of batch b along the context.
func (p *Profile) line(b int) Line {
	l := Line{knots: p.contexts, values: make([]float64, len(p.rows))}
	for i, row := range p.rows {
		l.values[i] = interpolate(row, float64(b))
	}
	return l
}

// interpolate is y at x on the polyline through pts (sorted by x),
// extended beyond its ends along its first and last segments; a single
// point is a constant.
func interpolate(pts []point, x float64) float64 {
	if len(pts) == 1 {
		return pts[0].y
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].x > x }) // first point right of x
	i = min(max(i, 1), len(pts)-1)
	a, b := pts[i-1], pts[i]
	return a.y + (b.y-a.y)*(x-a.x)/(b.x-a.x)
}

// Line is the ITL of one batch as a function of the context: piecewise
// linear through the measured contexts, extended beyond the first and the
// last along the nearest segment. Values are seconds.
type Line struct {
	knots, values []float64
}

// At is the ITL in seconds at context c.
func (l Line) At(c float64) float64 {
	a, s, _, _ := l.Segment(c)
	return a + s*c
}

// Segment is the linear piece of the line that holds at context c: the
// ITL is alpha + slope×context in seconds for contexts in [lo, hi); lo is
// -Inf for the first piece and hi +Inf for the last.
func (l Line) Segment(c float64) (alpha, slope, lo, hi float64) {
	n := len(l.knots)
	if n == 1 {
		return l.values[0], 0, math.Inf(-1), math.Inf(1)
	}
	// Pieces: i in 1..n-1 joins knots i-1 and i; piece 1 reaches down to
	// -Inf and piece n-1 up to +Inf.
	i := sort.SearchFloat64s(l.knots[1:n-1], c) + 1 // first inner knot >= c, as a piece index
	if i < n-1 && l.knots[i] == c {
		i++ // c on an inner knot belongs to the piece above it
	}
	x0, x1, y0, y1 := l.knots[i-1], l.knots[i], l.values[i-1], l.values[i]
	slope = (y1 - y0) / (x1 - x0)
	alpha = y0 - slope*x0
	lo, hi = math.Inf(-1), math.Inf(1)
	if i > 1 {
		lo = x0
	}
	if i < n-1 {
		hi = x1
	}
	return alpha, slope, lo, hi
}

// Line is the ITL of batch sequences along the context.
func (p *Profile) Line(batch int) Line {
	batch = max(batch, 1)
	if batch < len(p.lines) {
		return p.lines[batch]
	}
	return p.line(batch)
}

// ITL is the time of one decode step of batch sequences at a mean
// context of context tokens: the inter-token latency each of them sees.
func (p *Profile) ITL(batch int, context float64) time.Duration {
	return time.Duration(p.Line(batch).At(context) * float64(time.Second))
}

// ITLSeconds is ITL in seconds, unrounded.
func (p *Profile) ITLSeconds(batch int, context float64) float64 {
	return p.Line(batch).At(context)
}

// PrefillTokensPerSecond is the GPU's prefill rate: the prompt tokens of
// the whole prefill table over its total time, so that each measurement
// weighs by the tokens it prefilled (35–40 k per second on an H100 for
// an 8B model, flat over prompts of 512 to 8,192 tokens).
func (p *Profile) PrefillTokensPerSecond() float64 { return p.prefill }

// Contexts are the measured contexts, ascending.
func (p *Profile) Contexts() []float64 { return slices.Clone(p.contexts) }

// MaxBatchWithin is the largest batch whose decode steps at a mean
// context of context tokens take at most itl, every smaller batch
// included (a batch grows through them), and whose KV cache fits
// (batch × context within KVTokensFit): the capacity of one GPU at an ITL
// target. 0 when not even one sequence meets it.
func (p *Profile) MaxBatchWithin(itl time.Duration, context float64) int {
	limit := MaxBatch
	if context > 0 {
		limit = min(limit, int(float64(p.KVTokensFit)/context))
	}
	target := itl.Seconds()
	for b := 1; b <= limit; b++ {
		if p.lines[b].At(context) > target {
			return b - 1
		}
	}
	return limit
}

// DecodeTokensPerSecond is the output tokens per second of batch
// sequences at a mean context of context tokens.
func (p *Profile) DecodeTokensPerSecond(batch int, context float64) float64 {
	return float64(batch) / p.ITLSeconds(batch, context)
}
