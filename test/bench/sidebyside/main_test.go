package main

import (
	"testing"
	"time"
)

func TestReadSettings(t *testing.T) {
	env := map[string]string{"BENCH_N": "10000", "BENCH_QPS": "500/1000", "BENCH_REACTIONS": "0", "BENCH_OUT": "/tmp/b.md", "BENCH_ENV": "GOMEMLIMIT=140MiB GOGC=100"}
	s, err := readSettings(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.n != 10000 || len(s.limits) != 1 || s.limits[0] != (limits{500, 1000}) || s.reactions != 0 || s.out != "/tmp/b.md" || len(s.env) != 2 || s.env[0] != "GOMEMLIMIT=140MiB" {
		t.Errorf("settings = %+v", s)
	}
	for _, bad := range []map[string]string{{"BENCH_N": "0"}, {"BENCH_QPS": "500"}, {"BENCH_REACTIONS": "-1"}, {"BENCH_STEADY": "x"}, {"BENCH_ENV": "GOMEMLIMIT"}} {
		if _, err := readSettings(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestReactionMedianAndMax(t *testing.T) {
	s := time.Second
	tests := []struct {
		samples     []time.Duration
		median, max time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{3 * s}, 3 * s, 3 * s},
		{[]time.Duration{4 * s, 1 * s, 2 * s}, 2 * s, 4 * s},
		{[]time.Duration{4 * s, 1 * s, 2 * s, 3 * s}, 2500 * time.Millisecond, 4 * s},
	}
	for _, tc := range tests {
		r := reaction{samples: tc.samples}
		if r.median() != tc.median || r.max() != tc.max {
			t.Errorf("%v: median %v max %v, want %v %v", tc.samples, r.median(), r.max(), tc.median, tc.max)
		}
	}
}
