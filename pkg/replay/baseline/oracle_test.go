package baseline

import (
	"math"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/gpuprofile"
	enginemodel "github.com/gputask/gputask-controller/pkg/replay/engine"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// together is n requests of tok arriving at once.
func together(n int, tok workload.Tokens) workload.Trace {
	var tr workload.Trace
	for range n {
		tr.Requests = append(tr.Requests, workload.Served{Service: time.Minute})
		tr.Tokens = append(tr.Tokens, tok)
	}
	return tr
}

// On an engine the zero-wait oracle runs each worker at the largest batch
// that keeps the ITL, within its KV cache and its scheduler: that many
// requests in flight fill one worker, one more a second, and a prefill
// takes a share of a worker of its own.
func TestOracleOnAnEngine(t *testing.T) {
	p, err := gpuprofile.Lookup("h100-llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	e := enginemodel.Config{Profile: p}.WithDefaults()
	short := workload.Tokens{InputTokens: 1000, OutputTokens: 48} // a mean context of 1,024
	long := workload.Tokens{InputTokens: 60000, OutputTokens: 2}  // 60,001: the KV cache binds
	tight := p.MaxBatchWithin(20*time.Millisecond, 1024)          // the ITL binds
	if p.MaxBatchWithin(50*time.Millisecond, 1024) < e.MaxNumSeqs || tight <= 1 || tight >= e.MaxNumSeqs {
		t.Fatalf("the profile no longer separates the cases: %d and %d sequences within 50 and 20 ms", p.MaxBatchWithin(50*time.Millisecond, 1024), tight)
	}
	kv := int(float64(e.CacheTokens()) / 60001)
	withPrefill := short
	withPrefill.Prefill = time.Millisecond // 256 of them fill a fifth of a worker more
	for _, tc := range []struct {
		name  string
		itl   time.Duration
		tok   workload.Tokens
		batch int // requests that fill exactly one worker
	}{
		{"scheduler", 50 * time.Millisecond, short, e.MaxNumSeqs},
		{"ITL", 20 * time.Millisecond, short, tight},
		{"KV cache", 50 * time.Millisecond, long, kv},
		{"no ITL target", 0, long, kv},
		{"one sequence over the ITL", time.Millisecond, short, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Oracle{Startup: time.Minute, SLO: sim.SLOTargets{ITL: tc.itl, Percentile: 95}, Engine: &e}
			for n, want := range map[int]int{tc.batch: 1, tc.batch + 1: 2, 2 * tc.batch: 2, 2*tc.batch + 1: 3} {
				if got := o.Run(together(n, tc.tok), time.Second).PeakReplicas; got != want {
					t.Errorf("%d requests of a batch of %d: %d workers, want %d", n, tc.batch, got, want)
				}
			}
			res := o.Run(together(1, tc.tok), time.Second)
			itl := p.ITL(tc.batch, tc.tok.InputTokens+tc.tok.OutputTokens/2)
			if got := time.Duration(res.ITLP95 * float64(time.Second)); got.Round(time.Microsecond) != itl.Round(time.Microsecond) {
				t.Errorf("ITL %v, want the batch's %v", got, itl)
			}
			stay := time.Duration((tc.tok.OutputTokens - 1) * float64(itl))
			if math.Abs(res.GPUHours-stay.Hours()) > 1e-9 || res.WaitP95 != 0 {
				t.Errorf("%.9f GPU-h and a wait of %v, want the stay's %.9f and none", res.GPUHours, res.WaitP95, stay.Hours())
			}
		})
	}
	t.Run("a KV cache larger than the profile's", func(t *testing.T) {
		big := enginemodel.Config{Profile: p, KVTokens: 2 * p.KVTokensFit}.WithDefaults()
		o := Oracle{Startup: time.Minute, SLO: sim.SLOTargets{ITL: 50 * time.Millisecond, Percentile: 95}, Engine: &big}
		b := int(float64(big.CacheTokens()) / 60001)
		if b <= kv || p.ITL(b, 60001) > 50*time.Millisecond {
			t.Fatalf("the cache of %d tokens holds %d sequences of 60,001 (the profile's %d), at an ITL of %v", big.CacheTokens(), b, kv, p.ITL(b, 60001))
		}
		if got := o.Run(together(b, long), time.Second).PeakReplicas; got != 1 {
			t.Errorf("%d sequences of 60,001 tokens in a cache of %d: %d workers, want 1", b, big.CacheTokens(), got)
		}
	})
	t.Run("longer than the KV cache", func(t *testing.T) {
		o := Oracle{Startup: time.Minute, SLO: sim.SLOTargets{ITL: 50 * time.Millisecond, Percentile: 95}, Engine: &e}
		huge := workload.Tokens{InputTokens: float64(e.CacheTokens()), OutputTokens: 16}
		if res := o.Run(together(2, huge), time.Second); res.FailedRequests != 2 || res.PeakReplicas != 0 || res.GPUHours != 0 {
			t.Errorf("two requests no cache holds: %d failed, peak %d, %v GPU-h; want both failed on no worker", res.FailedRequests, res.PeakReplicas, res.GPUHours)
		}
		mixed := together(1, huge)
		mixed.Requests = append(mixed.Requests, workload.Served{Service: time.Minute})
		mixed.Tokens = append(mixed.Tokens, short)
		if res := o.Run(mixed, time.Second); res.FailedRequests != 1 || res.PeakReplicas != 1 {
			t.Errorf("one request no cache holds beside one: %d failed, peak %d; want 1 and 1", res.FailedRequests, res.PeakReplicas)
		}
	})
	t.Run("prefill", func(t *testing.T) {
		o := Oracle{Startup: time.Minute, SLO: sim.SLOTargets{ITL: 50 * time.Millisecond, Percentile: 95}, Engine: &e}
		if got := o.Run(together(e.MaxNumSeqs, withPrefill), time.Second).PeakReplicas; got != 2 {
			t.Errorf("a full batch that also prefills: %d workers, want 2", got)
		}
		res := o.Run(together(1, withPrefill), time.Second)
		if got := time.Duration(res.TTFTP50 * float64(time.Second)); got != withPrefill.Prefill {
			t.Errorf("TTFT %v, want the prefill's %v", got, withPrefill.Prefill)
		}
	})
}
