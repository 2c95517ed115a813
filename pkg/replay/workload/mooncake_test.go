package workload

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadMooncake(t *testing.T) {
	// hash_ids and fields the reader does not know are skipped; blank
	// lines too; requests at the same millisecond keep their order.
	in := `{"timestamp": 1000, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}
{"timestamp": 1000, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14], "session": "a"}

{"hash_ids": [], "output_length": 0, "input_length": 0, "timestamp": 4052.5}
{"timestamp":99999,"input_length":1,"output_length":2}`
	got, err := ReadMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{0, 6755, 500},
		{0, 7319, 490},
		{3052500 * time.Microsecond, 0, 0},
		{98999 * time.Millisecond, 1, 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests = %v, want %v: arrivals in ms from the first line", got, want)
	}
}

func TestReadMooncakeErrors(t *testing.T) {
	const good = `{"timestamp": 0, "input_length": 10, "output_length": 5}` + "\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "line 1: the trace is empty"},
		{"blank only", "\n \n", "line 1: the trace is empty"},
		{"not JSON", good + "timestamp=5\n", "line 2: not a JSON request"},
		{"cut short", good + good + `{"timestamp": 5, "input_length": 1` + "\n", "line 3: not a JSON request"},
		{"two objects", good + `{"timestamp": 5, "input_length": 1, "output_length": 1} {}` + "\n", "line 2: not a JSON request"},
		{"no timestamp", good + `{"input_length": 1, "output_length": 1}` + "\n", `line 2: no "timestamp"`},
		{"no input", good + `{"timestamp": 5, "output_length": 1}` + "\n", `line 2: no "input_length"`},
		{"no output", good + "\n" + `{"timestamp": 5, "input_length": 1}` + "\n", `line 3: no "output_length"`},
		{"null output", good + `{"timestamp": 5, "input_length": 1, "output_length": null}` + "\n", `line 2: no "output_length"`},
		{"negative input", good + `{"timestamp": 5, "input_length": -1, "output_length": 1}` + "\n", "line 2: input_length -1 is not a token count"},
		{"negative output", good + `{"timestamp": 5, "input_length": 1, "output_length": -3}`, "line 2: output_length -3 is not a token count"},
		{"fractional length", good + `{"timestamp": 5, "input_length": 1.5, "output_length": 1}`, "line 2: not a JSON request"},
		{"string timestamp", good + `{"timestamp": "5", "input_length": 1, "output_length": 1}`, "line 2: not a JSON request"},
		{"unsorted", `{"timestamp": 10, "input_length": 1, "output_length": 1}` + "\n" + good, "line 2: timestamp 0 is earlier than the line before it (10)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one with %q", err, tc.want)
			}
		})
	}
}
