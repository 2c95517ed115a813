package workload_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gputask/gputask-controller/pkg/replay/workload"
)

// The CSV written is read back by the replay with the flags that read its
// synthetic traces (REPLAY_TRACE_FLAGS in the Makefile): arrivals to the
// millisecond, tokens as they were.
func TestWriteCSVReadsBack(t *testing.T) {
	reqs := []workload.Request{
		{Arrival: 2 * time.Second, InputTokens: 4000, OutputTokens: 40},
		{Arrival: 2500 * time.Millisecond, InputTokens: 0, OutputTokens: 1},
		{Arrival: 3601*time.Second + 7*time.Millisecond, InputTokens: 8000, OutputTokens: 80},
	}
	var buf bytes.Buffer
	if err := workload.WriteCSV(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "Timestamp,Request tokens,Response tokens\n2.000,4000,40\n") {
		t.Errorf("CSV begins %q", buf.String())
	}
	tr, err := workload.ReadTrace(&buf, workload.TraceOptions{TimeColumn: workload.ColumnTimestamp, Service: workload.ServiceModel{
		InputTokensColumn: workload.ColumnInputTokens, OutputTokensColumn: workload.ColumnOutputTokens,
		PrefillPerSecond: 4000, DecodePerSecond: 40,
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The replay counts arrivals from the first request.
	wantArrival := []time.Duration{0, 500 * time.Millisecond, 3599*time.Second + 7*time.Millisecond}
	wantService := []time.Duration{2 * time.Second, 25 * time.Millisecond, 4 * time.Second}
	for i, r := range tr.Requests {
		if r.Arrival != wantArrival[i] || r.Service != wantService[i] || tr.Tokens[i].InputTokens != float64(reqs[i].InputTokens) || tr.Tokens[i].OutputTokens != float64(reqs[i].OutputTokens) {
			t.Errorf("request %d read back as %+v %+v, want arrival %v, service %v, tokens %d and %d",
				i, r, tr.Tokens[i], wantArrival[i], wantService[i], reqs[i].InputTokens, reqs[i].OutputTokens)
		}
	}
}

// A trace without requests is still a trace with a header, which the
// replay refuses with its own message rather than a parse error.
func TestWriteCSVEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := workload.WriteCSV(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "Timestamp,Request tokens,Response tokens\n" {
		t.Errorf("empty CSV = %q, want the header alone", buf.String())
	}
}
