package workload

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A Mooncake trace becomes the trace its CSV twin does, under every
// service model and through the rate scale's resampling.
func TestReadMooncakeTraceLikeCSV(t *testing.T) {
	jsonl := `{"timestamp": 5000, "input_length": 4000, "output_length": 40, "hash_ids": [1, 2]}
{"timestamp": 5500, "input_length": 0, "output_length": 400}
{"timestamp": 9000, "input_length": 8000, "output_length": 4}
`
	csv := "t,in,out\n5,4000,40\n5.5,0,400\n9,8000,4\n"
	tokens := ServiceModel{InputTokensColumn: "in", OutputTokensColumn: "out", PrefillPerSecond: 4000, DecodePerSecond: 40}
	lognormal := ServiceModel{Fixed: 5 * time.Second, Sigma: 0.5}
	for _, opts := range []TraceOptions{
		{TimeColumn: "t", Service: tokens},
		{TimeColumn: "t", Service: tokens, RateScale: 2.5, Seed: 3},
		{TimeColumn: "t", Service: lognormal, RateScale: 0.5, Seed: 4},
	} {
		want := readTestTrace(t, csv, opts)
		got, err := ReadMooncakeTrace(strings.NewReader(jsonl), opts)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: Mooncake trace %+v, want %+v", opts, got, want)
		}
	}
	got, err := ReadMooncakeTrace(strings.NewReader(jsonl), TraceOptions{Service: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if got.Requests[1].Arrival != 500*time.Millisecond || got.Requests[1].Service != 10*time.Second || got.Tokens[2].InputTokens != 8000 {
		t.Errorf("without a time column: %+v %+v", got.Requests, got.Tokens)
	}
}

func TestReadMooncakeTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		opts TraceOptions
		want string
	}{
		{`{"timestamp": 0, "input_length": 1, "output_length": 1}` + "\n" + `{"timestamp": 1, "input_length": 1}`, TraceOptions{Service: fixed30s}, `line 2: no "output_length"`},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1}`, TraceOptions{Service: ServiceModel{Column: "svc"}}, "no service column"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1}`, TraceOptions{}, "no service time"},
	} {
		_, err := ReadMooncakeTrace(strings.NewReader(tc.in), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error = %v, want one with %q", err, tc.want)
		}
	}
}
