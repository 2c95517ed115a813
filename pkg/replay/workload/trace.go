package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Served is one request of a Trace as the service model gives it to the
// pool: when it arrives and how long a worker slot is busy with it. Its
// tokens, when the trace has them, are in Trace.Tokens at the same index.
type Served struct {
	// Arrival is when the request arrives, from the start of the trace.
	Arrival time.Duration
	// Service is how long a worker slot is busy with it.
	Service time.Duration
}

// Trace is a request trace, sorted by arrival.
type Trace struct {
	Requests []Served
	// Tokens are the requests' token counts, by index, when the trace has
	// token columns; nil otherwise. Batched serving (Pool.SetBatched)
	// needs them.
	Tokens []Tokens
}

// Tokens is what a request asks of a batching server: a prefill of fixed
// length, then OutputTokens decoded at the batch's inter-token latency.
type Tokens struct {
	Prefill      time.Duration
	OutputTokens float64
	// InputTokens is the prompt's length, as the trace gives it.
	InputTokens float64
}

// Duration is the arrival time of the last request.
func (t Trace) Duration() time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Arrival
}

// ServiceModel gives each request its service time.
type ServiceModel struct {
	// Column names a column holding the service time in seconds.
	Column string
	// InputTokensColumn and OutputTokensColumn name token-count columns; the
	// service time is input/PrefillPerSecond + output/DecodePerSecond.
	InputTokensColumn, OutputTokensColumn string
	PrefillPerSecond, DecodePerSecond     float64
	// Fixed is a fixed service time, or the median of a log-normal one when
	// Sigma is above 0.
	Fixed time.Duration
	Sigma float64
}

func (m ServiceModel) usesTokens() bool {
	return m.InputTokensColumn != "" || m.OutputTokensColumn != ""
}

// Validate reports a model that names no source, or more than one.
func (m ServiceModel) Validate() error {
	sources := 0
	if m.Column != "" {
		sources++
	}
	if m.usesTokens() {
		sources++
		if m.InputTokensColumn != "" && !(m.PrefillPerSecond > 0) {
			return errors.New("--input-tokens-column needs --prefill-tokens-per-second above 0")
		}
		if m.OutputTokensColumn != "" && !(m.DecodePerSecond > 0) {
			return errors.New("--output-tokens-column needs --decode-tokens-per-second above 0")
		}
	}
	if m.Fixed > 0 {
		sources++
	}
	switch {
	case sources == 0:
		return errors.New("no service time: give --service-column, the token columns, or --service")
	case sources > 1:
		return errors.New("more than one service time: give only one of --service-column, the token columns, or --service")
	case m.Sigma < 0:
		return errors.New("log-normal sigma must not be negative")
	}
	return nil
}

// ParseServiceDuration reads --service: a duration such as "30s", or
// "lognormal:MEDIAN,SIGMA" where MEDIAN is a duration or seconds.
func ParseServiceDuration(s string) (ServiceModel, error) {
	if rest, ok := strings.CutPrefix(s, "lognormal:"); ok {
		median, sigma, ok := strings.Cut(rest, ",")
		if !ok {
			return ServiceModel{}, fmt.Errorf("service %q: want lognormal:MEDIAN,SIGMA", s)
		}
		d, err := parseSeconds(median)
		if err != nil || d <= 0 {
			return ServiceModel{}, fmt.Errorf("service %q: median must be a positive duration", s)
		}
		sg, err := strconv.ParseFloat(strings.TrimSpace(sigma), 64)
		if err != nil || sg < 0 || math.IsInf(sg, 0) {
			return ServiceModel{}, fmt.Errorf("service %q: sigma must be a number >= 0", s)
		}
		return ServiceModel{Fixed: d, Sigma: sg}, nil
	}
	d, err := parseSeconds(s)
	if err != nil || d <= 0 {
		return ServiceModel{}, fmt.Errorf("service %q: want a positive duration such as 30s, or lognormal:MEDIAN,SIGMA", s)
	}
	return ServiceModel{Fixed: d}, nil
}

// parseSeconds reads a Go duration, or a plain number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%q is not finite", s)
		}
		return time.Duration(v * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// TraceOptions say how to read a CSV trace.
type TraceOptions struct {
	// TimeColumn names the arrival column: a timestamp ("2006-01-02
	// 15:04:05.9999999" or RFC 3339) or seconds from the start.
	TimeColumn string
	Service    ServiceModel
	// RateScale multiplies the arrival rate by resampling; 0 means 1.
	RateScale float64
	// Seed seeds the resampling and log-normal service times.
	Seed uint64
}

// timestampLayouts are the timestamp forms of the time column, besides
// plain seconds.
var timestampLayouts = []string{"2006-01-02 15:04:05.9999999", time.RFC3339Nano}

// row is what one CSV line says before the service model applies.
type row struct {
	arrival         time.Duration
	service         float64 // seconds, from the service column
	input, output   float64 // tokens
	hasColumnValues bool
}

// ReadTrace reads a CSV trace with a header row. Arrivals are taken
// relative to the first row, which must be the earliest: rows must be
// sorted by time. Errors name the line.
func ReadTrace(r io.Reader, opts TraceOptions) (Trace, error) {
	if err := opts.Service.Validate(); err != nil {
		return Trace{}, err
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return Trace{}, errors.New("line 1: the trace is empty: want a header row and at least one request")
	}
	if err != nil {
		return Trace{}, fmt.Errorf("reading the header: %w", err)
	}
	cols, err := columnIndexes(header, opts)
	if err != nil {
		return Trace{}, err
	}

	var rows []row
	var first time.Time
	var firstSeconds float64
	kind := -1 // index into timestampLayouts, or len(timestampLayouts) for seconds
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("reading the trace: %w", err)
		}
		line, _ := cr.FieldPos(0)
		field := func(i int) (string, error) {
			if i >= len(rec) {
				return "", fmt.Errorf("line %d: missing column %q", line, header[i])
			}
			return strings.TrimSpace(rec[i]), nil
		}
		var rw row
		ts, err := field(cols.time)
		if err != nil {
			return Trace{}, err
		}
		if kind < 0 {
			kind = timeKind(ts)
			if kind < 0 {
				return Trace{}, fmt.Errorf("line %d: time %q in column %q is neither seconds nor a timestamp like %q or RFC 3339", line, ts, opts.TimeColumn, timestampLayouts[0])
			}
		}
		if kind == len(timestampLayouts) {
			v, err := strconv.ParseFloat(ts, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return Trace{}, fmt.Errorf("line %d: time %q in column %q is not a number of seconds like the rows before it", line, ts, opts.TimeColumn)
			}
			if len(rows) == 0 {
				firstSeconds = v
			}
			rw.arrival = time.Duration((v - firstSeconds) * float64(time.Second))
		} else {
			t, err := time.Parse(timestampLayouts[kind], ts)
			if err != nil {
				return Trace{}, fmt.Errorf("line %d: time %q in column %q does not parse like the rows before it: %w", line, ts, opts.TimeColumn, err)
			}
			if len(rows) == 0 {
				first = t
			}
			rw.arrival = t.Sub(first)
		}
		if len(rows) > 0 && rw.arrival < rows[len(rows)-1].arrival {
			return Trace{}, fmt.Errorf("line %d: time %q is earlier than the row before it: the trace must be sorted by %q", line, ts, opts.TimeColumn)
		}
		if err := readServiceColumns(&rw, cols, field, line, header); err != nil {
			return Trace{}, err
		}
		rows = append(rows, rw)
	}
	if len(rows) == 0 {
		return Trace{}, errors.New("line 2: the trace has a header but no requests")
	}
	return traceOf(rows, opts), nil
}

// ReadMooncakeTrace reads a trace in Mooncake's JSONL format
// (ReadMooncake). Its fields are fixed, so the time column is not
// needed, and the token columns, whatever they name, say only that the
// service time counts input_length and output_length; a service column
// does not exist in it.
func ReadMooncakeTrace(r io.Reader, opts TraceOptions) (Trace, error) {
	if err := opts.Service.Validate(); err != nil {
		return Trace{}, err
	}
	if opts.Service.Column != "" {
		return Trace{}, errors.New("a Mooncake trace has no service column: give the token columns or --service")
	}
	reqs, err := ReadMooncake(r)
	if err != nil {
		return Trace{}, err
	}
	rows := make([]row, len(reqs))
	for i, q := range reqs {
		rows[i] = row{arrival: q.Arrival, input: float64(q.InputTokens), output: float64(q.OutputTokens), hasColumnValues: true}
	}
	return traceOf(rows, opts), nil
}

// traceOf applies the rate scale and the service model to the rows read.
func traceOf(rows []row, opts TraceOptions) Trace {
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	rows = scaleRate(rows, opts.RateScale, rng)
	tr := Trace{Requests: make([]Served, len(rows))}
	for i, rw := range rows {
		tr.Requests[i] = Served{Arrival: rw.arrival, Service: serviceOf(rw, opts.Service, rng)}
	}
	if opts.Service.usesTokens() {
		tr.Tokens = make([]Tokens, len(rows))
		for i, rw := range rows {
			tr.Tokens[i].OutputTokens, tr.Tokens[i].InputTokens = rw.output, rw.input
			if opts.Service.PrefillPerSecond > 0 {
				tr.Tokens[i].Prefill = time.Duration(rw.input / opts.Service.PrefillPerSecond * float64(time.Second))
			}
		}
	}
	return tr
}

// traceColumns are the indexes of the columns read; -1 when unused.
type traceColumns struct {
	time, service, input, output int
}

func columnIndexes(header []string, opts TraceOptions) (traceColumns, error) {
	find := func(name string) (int, error) {
		if name == "" {
			return -1, nil
		}
		for i, h := range header {
			if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) == name {
				return i, nil
			}
		}
		return -1, fmt.Errorf("line 1: no column %q in the header (columns: %s)", name, strings.Join(header, ", "))
	}
	if opts.TimeColumn == "" {
		return traceColumns{}, errors.New("no time column: give --time-column")
	}
	var c traceColumns
	var err error
	if c.time, err = find(opts.TimeColumn); err != nil {
		return c, err
	}
	if c.service, err = find(opts.Service.Column); err != nil {
		return c, err
	}
	if c.input, err = find(opts.Service.InputTokensColumn); err != nil {
		return c, err
	}
	if c.output, err = find(opts.Service.OutputTokensColumn); err != nil {
		return c, err
	}
	return c, nil
}

// timeKind finds how a time value is written: the index of its layout in
// timestampLayouts, len(timestampLayouts) for seconds, or -1.
func timeKind(s string) int {
	if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		return len(timestampLayouts)
	}
	for i, layout := range timestampLayouts {
		if _, err := time.Parse(layout, s); err == nil {
			return i
		}
	}
	return -1
}

func readServiceColumns(rw *row, cols traceColumns, field func(int) (string, error), line int, header []string) error {
	number := func(i int) (float64, error) {
		if i < 0 {
			return 0, nil
		}
		s, err := field(i)
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("line %d: %q in column %q is not a number >= 0", line, s, header[i])
		}
		return v, nil
	}
	var err error
	if rw.service, err = number(cols.service); err != nil {
		return err
	}
	if rw.input, err = number(cols.input); err != nil {
		return err
	}
	if rw.output, err = number(cols.output); err != nil {
		return err
	}
	rw.hasColumnValues = cols.service >= 0 || cols.input >= 0 || cols.output >= 0
	return nil
}

// serviceOf is a request's service time under the model.
func serviceOf(rw row, m ServiceModel, rng *rand.Rand) time.Duration {
	var seconds float64
	switch {
	case m.Column != "":
		seconds = rw.service
	case m.usesTokens():
		if m.PrefillPerSecond > 0 {
			seconds += rw.input / m.PrefillPerSecond
		}
		if m.DecodePerSecond > 0 {
			seconds += rw.output / m.DecodePerSecond
		}
	case m.Sigma > 0:
		seconds = m.Fixed.Seconds() * math.Exp(m.Sigma*rng.NormFloat64())
	default:
		return m.Fixed
	}
	// A request takes some time: a zero would make an in-flight count
	// that no load index ever sees.
	return max(time.Duration(seconds*float64(time.Second)), time.Millisecond)
}

// scaleRate multiplies the arrival rate by x: each row is kept
// floor(x) times, and once more with probability x − floor(x). The first
// copy keeps the row's arrival; further copies arrive at a uniform time
// before the next row, so a copy never lands in another row's burst.
func scaleRate(rows []row, x float64, rng *rand.Rand) []row {
	if x <= 0 || x == 1 {
		return rows
	}
	whole, frac := math.Floor(x), x-math.Floor(x)
	out := make([]row, 0, int(float64(len(rows))*x)+1)
	for i, rw := range rows {
		copies := int(whole)
		if rng.Float64() < frac {
			copies++
		}
		gap := time.Duration(0)
		if i+1 < len(rows) {
			gap = rows[i+1].arrival - rw.arrival
		}
		for c := 0; c < copies; c++ {
			cp := rw
			if c > 0 {
				cp.arrival += time.Duration(rng.Float64() * float64(gap))
			}
			out = append(out, cp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].arrival < out[j].arrival })
	return out
}
