package workload

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func readTestTrace(t *testing.T, csv string, opts TraceOptions) Trace {
	t.Helper()
	tr, err := ReadTrace(strings.NewReader(csv), opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

var fixed30s = ServiceModel{Fixed: 30 * time.Second}

func TestReadTraceTimeForms(t *testing.T) {
	for name, csv := range map[string]string{
		"seconds":   "t,x\n100,a\n100.5,b\n102,c\n",
		"timestamp": "t\n2024-05-01 10:00:00\n2024-05-01 10:00:00.5\n2024-05-01 10:00:02\n",
		"rfc3339":   "t\n2024-05-01T10:00:00Z\n2024-05-01T10:00:00.5Z\n2024-05-01T12:00:02+02:00\n",
	} {
		tr := readTestTrace(t, csv, TraceOptions{TimeColumn: "t", Service: fixed30s})
		want := []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}
		for i, r := range tr.Requests {
			if r.Arrival != want[i] || r.Service != 30*time.Second {
				t.Errorf("%s: request %d = %+v, want arrival %v", name, i, r, want[i])
			}
		}
	}
}

func TestReadTraceServiceModels(t *testing.T) {
	csv := "time,in,out,svc\n0,1000,50,2.5\n1,2000,100,4\n"
	tokens := readTestTrace(t, csv, TraceOptions{TimeColumn: "time", Service: ServiceModel{
		InputTokensColumn: "in", OutputTokensColumn: "out", PrefillPerSecond: 1000, DecodePerSecond: 50}})
	if tokens.Requests[0].Service != 2*time.Second || tokens.Requests[1].Service != 4*time.Second {
		t.Errorf("token service = %v, %v; want 2s (1 + 1), 4s (2 + 2)", tokens.Requests[0].Service, tokens.Requests[1].Service)
	}
	if want := []Tokens{{time.Second, 50, 1000}, {2 * time.Second, 100, 2000}}; !slices.Equal(tokens.Tokens, want) {
		t.Errorf("tokens = %v, want %v: the prefill at its rate, the output and input tokens as they are", tokens.Tokens, want)
	}
	column := readTestTrace(t, csv, TraceOptions{TimeColumn: "time", Service: ServiceModel{Column: "svc"}})
	if column.Tokens != nil {
		t.Errorf("a trace without token columns has tokens %v", column.Tokens)
	}
	if column.Requests[0].Service != 2500*time.Millisecond {
		t.Errorf("column service = %v", column.Requests[0].Service)
	}
	m, err := ParseServiceDuration("lognormal:5s,0.5")
	if err != nil {
		t.Fatal(err)
	}
	a := readTestTrace(t, csv, TraceOptions{TimeColumn: "time", Service: m, Seed: 7})
	b := readTestTrace(t, csv, TraceOptions{TimeColumn: "time", Service: m, Seed: 7})
	if a.Requests[0].Service != b.Requests[0].Service || a.Requests[0].Service == a.Requests[1].Service {
		t.Errorf("log-normal services %v %v: want drawn per request, the same for a seed", a.Requests[0].Service, a.Requests[1].Service)
	}
}

func TestParseServiceDuration(t *testing.T) {
	for s, want := range map[string]ServiceModel{
		"30s":              {Fixed: 30 * time.Second},
		"12.5":             {Fixed: 12500 * time.Millisecond},
		"lognormal:8,0.7":  {Fixed: 8 * time.Second, Sigma: 0.7},
		"lognormal:2m,0.1": {Fixed: 2 * time.Minute, Sigma: 0.1},
	} {
		got, err := ParseServiceDuration(s)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1s", "lognormal:5s", "lognormal:5s,-1", "lognormal:0,1", "fast"} {
		if _, err := ParseServiceDuration(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

// Bad input is an error that names the line.
func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, csv string
		opts      TraceOptions
		want      string
	}{
		{"empty", "", TraceOptions{TimeColumn: "t", Service: fixed30s}, "empty"},
		{"header only", "t\n", TraceOptions{TimeColumn: "t", Service: fixed30s}, "no requests"},
		{"missing time column", "a,b\n1,2\n", TraceOptions{TimeColumn: "t", Service: fixed30s}, `line 1: no column "t"`},
		{"missing service column", "t\n1\n", TraceOptions{TimeColumn: "t", Service: ServiceModel{Column: "s"}}, `line 1: no column "s"`},
		{"unparsable time", "t\n1\n2\nnoon\n", TraceOptions{TimeColumn: "t", Service: fixed30s}, "line 4"},
		{"bad first time", "t\nnoon\n", TraceOptions{TimeColumn: "t", Service: fixed30s}, "line 2"},
		{"unsorted", "t\n1\n5\n3\n", TraceOptions{TimeColumn: "t", Service: fixed30s}, "line 4: time \"3\" is earlier"},
		{"bad tokens", "t,in\n0,1\n1,x\n", TraceOptions{TimeColumn: "t", Service: ServiceModel{InputTokensColumn: "in", PrefillPerSecond: 1}}, "line 3"},
		{"short row", "t,s\n0,1\n1\n", TraceOptions{TimeColumn: "t", Service: ServiceModel{Column: "s"}}, "line 3: missing column"},
		{"no service", "t\n0\n", TraceOptions{TimeColumn: "t"}, "no service time"},
		{"two services", "t,s\n0,1\n", TraceOptions{TimeColumn: "t", Service: ServiceModel{Column: "s", Fixed: time.Second}}, "more than one"},
		{"tokens without rate", "t,in\n0,1\n", TraceOptions{TimeColumn: "t", Service: ServiceModel{InputTokensColumn: "in"}}, "prefill"},
	} {
		_, err := ReadTrace(strings.NewReader(tc.csv), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// --rate-scale resamples: about x times the requests, sorted, the same for a seed.
func TestReadTraceRateScale(t *testing.T) {
	var b strings.Builder
	b.WriteString("t\n")
	for i := range 10000 {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	csv := b.String()
	for _, x := range []float64{0.5, 2.5} {
		a := readTestTrace(t, csv, TraceOptions{TimeColumn: "t", Service: fixed30s, RateScale: x, Seed: 3})
		again := readTestTrace(t, csv, TraceOptions{TimeColumn: "t", Service: fixed30s, RateScale: x, Seed: 3})
		want := 10000 * x
		if n := float64(len(a.Requests)); n < want*0.95 || n > want*1.05 {
			t.Errorf("x%v: %d requests, want about %v", x, len(a.Requests), want)
		}
		if len(a.Requests) != len(again.Requests) {
			t.Errorf("x%v: not reproducible", x)
		}
		for i := 1; i < len(a.Requests); i++ {
			if a.Requests[i].Arrival < a.Requests[i-1].Arrival {
				t.Fatalf("x%v: not sorted at %d", x, i)
			}
		}
	}
}

// ReadTrace never panics, and whatever it accepts is sorted with positive
// service times.
func FuzzReadTrace(f *testing.F) {
	f.Add("t,s\n0,1\n1.5,2\n")
	f.Add("t,s\n2024-05-01 10:00:00,1\n2024-05-01 10:00:01,x\n")
	f.Add("t,s\n2024-05-01T10:00:00Z,3\n1,2\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, csv string) {
		tr, err := ReadTrace(strings.NewReader(csv), TraceOptions{TimeColumn: "t", Service: ServiceModel{Column: "s"}, RateScale: 1.5})
		if err != nil {
			return
		}
		for i, r := range tr.Requests {
			if r.Service <= 0 || (i > 0 && r.Arrival < tr.Requests[i-1].Arrival) {
				t.Fatalf("request %d = %+v", i, r)
			}
		}
	})
}
