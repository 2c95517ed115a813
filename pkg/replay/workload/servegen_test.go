package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	windowsHead = "client,start_s,rate,cv,pattern,a,b\n"
	tokensHead  = "client,start_s,field,q0,q5,q10,q15,q20,q25,q30,q35,q40,q45,q50,q55,q60,q65,q70,q75,q80,q85,q90,q95,q96,q97,q98,q99,q99.5,q99.9,q100\n"
)

// writeFolder writes a model folder of ServeGen's form: the windows and
// the token lines, under their headers.
func writeFolder(t *testing.T, windows, tokens string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, WindowsFile), []byte(windowsHead+windows), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokensFile), []byte(tokensHead+tokens), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// flatTokens is a token line whose quantiles are all v.
func flatTokens(client, start int, field string, v int) string {
	s := fmt.Sprintf("%d,%d,%s", client, start, field)
	for range quantileLevels {
		s += fmt.Sprintf(",%d", v)
	}
	return s + "\n"
}

// windowLines are a client's windows of one pattern from start, every
// 600 s.
func windowLines(client, start, count int, rate, cv float64, pattern string, a, b float64) string {
	var sb strings.Builder
	for i := range count {
		fmt.Fprintf(&sb, "%d,%d,%v,%v,%s,%v,%v\n", client, start+600*i, rate, cv, pattern, a, b)
	}
	return sb.String()
}

func generate(t *testing.T, dir string, days int, scale float64, seed uint64) ([]Request, ServeGenSummary) {
	t.Helper()
	reqs, sum, err := GenerateServeGen(dir, 1, days, scale, seed)
	if err != nil {
		t.Fatal(err)
	}
	return reqs, sum
}

// weibullCV is the coefficient of variation of a Weibull of shape k.
func weibullCV(k float64) float64 {
	g1, g2 := math.Gamma(1+1/k), math.Gamma(1+2/k)
	return math.Sqrt(g2/(g1*g1) - 1)
}

// The inter-arrival times of a day of windows have the window's rate as
// their mean and its cv as their coefficient of variation, for both
// patterns, with the parameters as ServeGen fits them (Gamma shape a =
// 1/cv², scale b = 1/(rate·a); Weibull shape a, scale b = 1/(rate·Γ(1+1/a))).
// Before the stretch, the draws' mean is the distribution's own (a·b, or
// b·Γ(1+1/a)): a scale read as a rate, or shape and scale swapped, fails it.
func TestInterArrivalsMatchWindow(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		rate    float64
		shape   float64
	}{
		{PatternGamma, 2, 0.25},
		{PatternGamma, 0.5, 1},
		{PatternGamma, 5, 4},
		{PatternWeibull, 2, 0.6},
		{PatternWeibull, 0.5, 1},
		{PatternWeibull, 5, 2.5},
	} {
		t.Run(fmt.Sprintf("%s rate %v shape %v", tc.pattern, tc.rate, tc.shape), func(t *testing.T) {
			var cv, scale, mean float64
			if tc.pattern == PatternGamma {
				cv = 1 / math.Sqrt(tc.shape)
				scale = 1 / (tc.rate * tc.shape)
				mean = tc.shape * scale
			} else {
				cv = weibullCV(tc.shape)
				scale = 1 / (tc.rate * math.Gamma(1+1/tc.shape))
				mean = scale * math.Gamma(1+1/tc.shape)
			}
			g, err := newGaps(tc.pattern, tc.shape, scale)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			raw := 0.0
			const draws = 200000
			for range draws {
				raw += math.Exp(g.logDraw(rng))
			}
			if got := raw / draws; math.Abs(got/mean-1) > 0.03 {
				t.Errorf("mean of the draws = %.4g s, want %.4g", got, mean)
			}

			dir := writeFolder(t, windowLines(0, 0, 144, tc.rate, cv, tc.pattern, tc.shape, scale), flatTokens(0, 0, "output", 10)+flatTokens(0, 21600, "output", 10)+flatTokens(0, 43200, "output", 10)+flatTokens(0, 64800, "output", 10))
			reqs, _ := generate(t, dir, 1, 1, 7)
			// Each window's last arrival is on its end, where the next
			// window's gaps begin.
			var gaps []float64
			prev := 0.0
			for _, r := range reqs {
				gaps = append(gaps, r.Arrival.Seconds()-prev)
				prev = r.Arrival.Seconds()
			}
			m, sd := meanSD(gaps)
			if math.Abs(m*tc.rate-1) > 0.01 {
				t.Errorf("mean inter-arrival = %.4g s, want 1/rate = %.4g", m, 1/tc.rate)
			}
			if math.Abs(sd/m/cv-1) > 0.05 {
				t.Errorf("cv of inter-arrivals = %.3f, want %.3f", sd/m, cv)
			}
		})
	}
}

func meanSD(xs []float64) (float64, float64) {
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)))
}

// The n gaps of a window sum to the window, keep their proportions, and
// the last arrival falls on the window's end; logarithms far below what a
// float64 holds as a gap (a Gamma of shape 0.01 draws them) still spread.
func TestStretch(t *testing.T) {
	for _, tc := range []struct {
		name string
		logs []float64
		want []float64
	}{
		{"proportions", []float64{math.Log(1), math.Log(2), math.Log(3)}, []float64{100, 300, 600}},
		{"one", []float64{math.Log(42)}, []float64{600}},
		{"underflow", []float64{-2000, -2000 + math.Log(3)}, []float64{150, 600}},
		{"overflow", []float64{800, 800}, []float64{300, 600}},
		{"none", nil, nil},
	} {
		got := stretch(slices.Clone(tc.logs), 600)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if !(math.Abs(got[i]-tc.want[i]) <= 1e-9) { // NaN fails too
				t.Errorf("%s: offsets %v, want %v", tc.name, got, tc.want)
				break
			}
		}
		if len(got) > 0 && got[len(got)-1] != 600 {
			t.Errorf("%s: last arrival at %v, want exactly the window's end", tc.name, got[len(got)-1])
		}
	}

	// A window of the smallest fitted shapes keeps its count and stays
	// within the window, sorted.
	dir := writeFolder(t, "0,0,0.5,10,Gamma,0.01,0.5\n1,0,0.5,10,Weibull,0.01,0.001\n", flatTokens(0, 0, "output", 3)+flatTokens(1, 0, "output", 3))
	reqs, _ := generate(t, dir, 1, 1, 1)
	if len(reqs) != 600 {
		t.Errorf("%d requests, want 2 × 300", len(reqs))
	}
	for i, r := range reqs {
		if r.Arrival < 0 || r.Arrival > 600*time.Second || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
			t.Fatalf("request %d at %v: outside the window or out of order", i, r.Arrival)
		}
	}
}

// A window gives ⌈rate × scale × 600⌉ requests: 0.085/s is 51, not the 52
// that 0.085 × 600 in floating point (51.00000000000001) would round up to.
func TestWindowCounts(t *testing.T) {
	for _, tc := range []struct {
		rate, scale float64
		want        int
	}{
		{0.085, 1, 51},
		{0.38333333333333336, 1, 230},
		{0.39, 0.5, 117},
		{0.39, 0.1, 24},
		{0.001, 1, 1},
		{1.0 / 60, 3, 30},
		{84.58333333333333, 1, 50750},
	} {
		dir := writeFolder(t, fmt.Sprintf("3,1200,%v,1,Gamma,1,%v\n", tc.rate, 1/tc.rate), flatTokens(3, 0, "output", 5))
		reqs, sum := generate(t, dir, 1, tc.scale, 1)
		if len(reqs) != tc.want || sum.Requests != tc.want {
			t.Errorf("rate %v × %v: %d requests (summary %d), want %d", tc.rate, tc.scale, len(reqs), sum.Requests, tc.want)
		}
	}
}

// Drawn token lengths have the quantiles they are drawn from.
func TestQuantileDraw(t *testing.T) {
	// deepseek-r1's first output line: long and skewed.
	q := []float64{64, 421, 549, 650, 741, 828, 899, 978, 1042, 1107, 1172, 1238, 1311, 1390, 1479, 1588, 1704, 1899, 2225, 3211, 3613, 4090, 4993, 6329, 7640, 12696, 17997}
	for i, l := range quantileLevels {
		if got := quantileDraw(q, l/100); got != q[i] {
			t.Errorf("value at level %v = %v, want the quantile %v", l, got, q[i])
		}
	}
	if got := quantileDraw(q, 0.025); got != (64+421)/2.0 {
		t.Errorf("value at 2.5 %% = %v, want halfway between 64 and 421", got)
	}

	line := "0,0,output"
	for _, v := range q {
		line += fmt.Sprintf(",%v", v)
	}
	dir := writeFolder(t, windowLines(0, 0, 36, 10, 1, PatternGamma, 1, 0.1), line+"\n")
	reqs, _ := generate(t, dir, 1, 1, 3)
	out := make([]float64, len(reqs))
	for i, r := range reqs {
		out[i] = float64(r.OutputTokens)
	}
	slices.Sort(out)
	for i, l := range quantileLevels {
		if l == 0 || l > 99 {
			continue // the tail's last points are too steep for a sample
		}
		got := out[int(l/100*float64(len(out)))]
		if math.Abs(got-q[i]) > max(2, 0.02*q[i]) {
			t.Errorf("drawn %v %% quantile = %v, want %v", l, got, q[i])
		}
	}
}

// A request's tokens come from its client's quantiles for the 6 hours
// covering it; a folder without input quantiles gives no input tokens; a
// client without token data is left out, and said so; an output of 0
// tokens is one.
func TestTokensByWindowAndClient(t *testing.T) {
	windows := windowLines(0, 21000, 2, 1, 1, PatternGamma, 1, 1) + windowLines(1, 21000, 2, 3, 1, PatternGamma, 1, 1.0/3)
	tokens := flatTokens(0, 0, "input", 100) + flatTokens(0, 0, "output", 0) +
		flatTokens(0, 21600, "input", 200) + flatTokens(0, 21600, "output", 20)
	reqs, sum := generate(t, writeFolder(t, windows, tokens), 1, 1, 1)
	if len(reqs) != 1200 {
		t.Errorf("%d requests, want client 0's 2 × 600", len(reqs))
	}
	for _, r := range reqs {
		want := Request{Arrival: r.Arrival, InputTokens: 100, OutputTokens: 1}
		if r.Arrival >= 21600*time.Second {
			want.InputTokens, want.OutputTokens = 200, 20
		}
		if r != want {
			t.Fatalf("request %+v, want %+v", r, want)
		}
	}
	if sum.Clients != 2 || !slices.Equal(sum.LeftOut, []int{1}) || math.Abs(sum.LeftOutShare-0.75) > 1e-9 {
		t.Errorf("summary %+v, want 2 clients, client 1 left out with 3/4 of the requests", sum)
	}

	// mm-image's form: output quantiles only.
	reqs, _ = generate(t, writeFolder(t, windowLines(0, 0, 1, 1, 1, PatternGamma, 1, 1), flatTokens(0, 0, "output", 7)), 1, 1, 1)
	for _, r := range reqs {
		if r.InputTokens != 0 || r.OutputTokens != 7 {
			t.Fatalf("request %+v, want no input tokens and 7 output", r)
		}
	}

	// Token data that stop before a client's requests do are an error.
	_, _, err := GenerateServeGen(writeFolder(t, windowLines(0, 21600, 1, 1, 1, PatternGamma, 1, 1), flatTokens(0, 0, "output", 7)+flatTokens(0, 43200, "output", 7)), 1, 1, 1, 1)
	if err == nil || !strings.Contains(err.Error(), "client 0 has requests at") {
		t.Errorf("error = %v, want one saying client 0 has no token quantiles for its requests", err)
	}
}

// The same seed draws the same trace, another seed another; the first day
// of two is the draw of one day.
func TestGenerateDeterministic(t *testing.T) {
	windows := windowLines(0, 0, 150, 0.2, 2, PatternGamma, 0.25, 20) + windowLines(1, 0, 150, 0.3, 0.8, PatternWeibull, 1.3, 3.6)
	tokens := flatTokens(0, 0, "output", 5) + flatTokens(1, 0, "output", 6)
	for day := 1; day < 4; day++ {
		tokens += flatTokens(0, day*21600, "output", 5) + flatTokens(1, day*21600, "output", 6)
	}
	tokens += flatTokens(0, 86400, "output", 5) + flatTokens(1, 86400, "output", 6)
	dir := writeFolder(t, windows, tokens)
	a, _ := generate(t, dir, 2, 1.5, 11)
	b, _ := generate(t, dir, 2, 1.5, 11)
	if !slices.Equal(a, b) {
		t.Error("two draws with one seed differ")
	}
	c, _ := generate(t, dir, 2, 1.5, 12)
	if slices.Equal(a, c) {
		t.Error("two seeds draw the same trace")
	}
	one, _ := generate(t, dir, 1, 1.5, 11)
	if len(one) == 0 || len(one) >= len(a) || !slices.Equal(one, a[:len(one)]) {
		t.Errorf("the first day (%d requests) is not the start of the two days' draw (%d)", len(one), len(a))
	}
	for _, r := range one {
		if r.Arrival > 24*time.Hour {
			t.Fatalf("a one-day draw has a request at %v", r.Arrival)
		}
	}
	if _, _, err := GenerateServeGen(dir, 1, 3, 1, 1); err == nil || !strings.Contains(err.Error(), "span 2 days") {
		t.Errorf("3 days of 2: error %v", err)
	}
	// A draw from the second day: as many requests as the two days' draw
	// holds after its first, arrivals counted from the second day's start.
	second, _, err := GenerateServeGen(dir, 2, 1, 1.5, 11)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) == 0 || len(second) != len(a)-len(one) {
		t.Errorf("day 2 drew %d requests, want the %d of the two days' draw after its first", len(second), len(a)-len(one))
	}
	for _, r := range second {
		if r.Arrival < 0 || r.Arrival > 24*time.Hour {
			t.Fatalf("a draw from day 2 has a request at %v", r.Arrival)
		}
	}
	for _, tt := range []struct {
		first, days int
		want        string
	}{{0, 1, "first day is 1 or later"}, {2, 2, "span 2 days"}} {
		if _, _, err := GenerateServeGen(dir, tt.first, tt.days, 1, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("days %d from day %d: error %v, want %q", tt.days, tt.first, err, tt.want)
		}
	}
}

func TestLoadServeGenErrors(t *testing.T) {
	okWindow := "0,0,1,1,Gamma,1,1\n"
	okTokens := flatTokens(0, 0, "output", 5)
	for _, tc := range []struct {
		name, windows, tokens, want string
	}{
		{"unknown pattern", okWindow + "0,600,1,1,Lognormal,1,1\n", okTokens, `windows.csv:3: unknown pattern "Lognormal"`},
		{"empty pattern with a rate", okWindow + "0,600,1,1,,1,1\n", okTokens, `windows.csv:3: unknown pattern ""`},
		{"short line", okWindow + "0,600,1,1,Gamma,1\n", okTokens, "windows.csv: record on line 3: wrong number of fields"},
		{"negative rate", "0,0,-1,1,Gamma,1,1\n", okTokens, `windows.csv:2: rate "-1" is not a number >= 0`},
		{"start off the grid", "0,30,1,1,Gamma,1,1\n", okTokens, `windows.csv:2: start_s "30" is not a multiple of 600 s`},
		{"bad client", "x,0,1,1,Gamma,1,1\n", okTokens, `windows.csv:2: client "x"`},
		{"zero shape", "0,0,1,1,Weibull,0,1\n", okTokens, "windows.csv:2: Weibull shape 0 and scale 1 must be finite and above 0"},
		{"NaN scale", "0,0,1,1,Gamma,1,NaN\n", okTokens, "windows.csv:2: Gamma shape 1 and scale NaN"},
		{"twice", okWindow + okWindow, okTokens, "windows.csv: client 0 has two windows at 0 s"},
		{"no windows", "", okTokens, "windows.csv: no window with requests"},
		{"unknown field", okWindow, okTokens + flatTokens(0, 0, "image", 5), `tokens.csv:3: field "image"`},
		{"decreasing quantiles", okWindow, strings.Replace(okTokens, ",5,5\n", ",5,4\n", 1), "tokens.csv:2: q100 4 is below the quantile before it (5)"},
		{"token twice", okWindow, okTokens + okTokens, "tokens.csv:3: client 0 has two output windows at 0 s"},
		{"negative quantile", okWindow, strings.Replace(okTokens, ",output,5", ",output,-5", 1), `tokens.csv:2: q0 "-5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadServeGen(writeFolder(t, tc.windows, tc.tokens))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one with %q", err, tc.want)
			}
		})
	}

	// A header that is not ServeGen's is refused on line 1.
	dir := writeFolder(t, okWindow, okTokens)
	if err := os.WriteFile(filepath.Join(dir, WindowsFile), []byte("client,start,rate,cv,pattern,a,b\n"+okWindow), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServeGen(dir); err == nil || !strings.Contains(err.Error(), "windows.csv:1: header") {
		t.Errorf("foreign header: error %v", err)
	}
	if _, err := LoadServeGen(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing folder loads")
	}
}
