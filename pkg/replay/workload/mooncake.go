package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// mooncakeLine is one line of a Mooncake trace. Pointers tell a missing
// field from a zero; hash_ids (the prompt's KV blocks, for prefix caching)
// and any other field are not read, since the replay models no prefix cache.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
}

// ReadMooncake reads a trace in Mooncake's JSONL format: one JSON object a
// line, with `timestamp` (milliseconds since the first request),
// `input_length` and `output_length` (tokens). Arrivals count from the
// first line, and lines must be sorted by timestamp. Blank lines are
// skipped. A line that is not JSON, lacks a field, gives a negative length
// or goes back in time is an error that names its line.
func ReadMooncake(r io.Reader) ([]Request, error) {
	br := bufio.NewReader(r)
	var (
		reqs        []Request
		first, last float64
	)
	for line := 1; ; line++ {
		// ReadBytes, not a Scanner: hash_ids make lines of any length.
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if text := bytes.TrimSpace(b); len(text) > 0 {
			req, ts, perr := parseMooncakeLine(text, line)
			if perr != nil {
				return nil, perr
			}
			if len(reqs) == 0 {
				first = ts
			} else if ts < last {
				return nil, fmt.Errorf("line %d: timestamp %v is earlier than the line before it (%v): the trace must be sorted by timestamp", line, ts, last)
			}
			last = ts
			req.Arrival = time.Duration(math.Round((ts - first) * float64(time.Millisecond)))
			reqs = append(reqs, req)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(reqs) == 0 {
		return nil, errors.New("line 1: the trace is empty: want one JSON request a line")
	}
	return reqs, nil
}

func parseMooncakeLine(text []byte, line int) (Request, float64, error) {
	var m mooncakeLine
	if err := json.Unmarshal(text, &m); err != nil {
		return Request{}, 0, fmt.Errorf("line %d: not a JSON request: %w", line, err)
	}
	switch {
	case m.Timestamp == nil:
		return Request{}, 0, fmt.Errorf("line %d: no \"timestamp\"", line)
	case m.InputLength == nil:
		return Request{}, 0, fmt.Errorf("line %d: no \"input_length\"", line)
	case m.OutputLength == nil:
		return Request{}, 0, fmt.Errorf("line %d: no \"output_length\"", line)
	case *m.InputLength < 0 || *m.InputLength > math.MaxInt32:
		return Request{}, 0, fmt.Errorf("line %d: input_length %d is not a token count", line, *m.InputLength)
	case *m.OutputLength < 0 || *m.OutputLength > math.MaxInt32:
		return Request{}, 0, fmt.Errorf("line %d: output_length %d is not a token count", line, *m.OutputLength)
	}
	return Request{InputTokens: int(*m.InputLength), OutputTokens: int(*m.OutputLength)}, *m.Timestamp, nil
}
