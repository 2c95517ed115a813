package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The time grid of ServeGen's data.
const (
	// WindowSeconds is the length of a window of arrivals.
	WindowSeconds = 600
	// TokenWindowSeconds is the length of a window of token quantiles.
	TokenWindowSeconds = 6 * 3600
	daySeconds         = 24 * 3600
)

// The files of a ServeGen model folder.
const (
	WindowsFile = "windows.csv"
	TokensFile  = "tokens.csv"
)

var windowsHeader = []string{"client", "start_s", "rate", "cv", "pattern", "a", "b"}

// serveGenWindow is one client's 10-minute window.
type serveGenWindow struct {
	client int
	start  int64 // seconds from the start of the data
	rate   float64
	gaps   gaps
}

// tokenWindow is one client's token quantiles for the 6 hours from start.
type tokenWindow struct {
	start int64
	q     []float64 // at quantileLevels
}

// clientTokens are a client's token quantiles by field, sorted by start.
type clientTokens struct {
	input, output []tokenWindow
}

// ServeGen is one model folder of ServeGen's production windows
// (windows.csv and tokens.csv), read and checked.
type ServeGen struct {
	windows []serveGenWindow // sorted by start, then client
	tokens  map[int]*clientTokens
	// hasInput is false for a folder without input quantiles (mm-image,
	// whose prompts are text and images that the data leave out): its
	// requests have no input tokens.
	hasInput bool
	days     int
}

// LoadServeGen reads a model folder. A malformed line is an error that
// names its file and line.
func LoadServeGen(dir string) (*ServeGen, error) {
	s := &ServeGen{tokens: map[int]*clientTokens{}}
	if err := readCSV(filepath.Join(dir, WindowsFile), windowsHeader, s.addWindow); err != nil {
		return nil, err
	}
	if len(s.windows) == 0 {
		return nil, fmt.Errorf("%s: no window with requests", filepath.Join(dir, WindowsFile))
	}
	tokensHeader := []string{"client", "start_s", "field"}
	for _, l := range quantileLevels {
		tokensHeader = append(tokensHeader, "q"+strconv.FormatFloat(l, 'f', -1, 64))
	}
	if err := readCSV(filepath.Join(dir, TokensFile), tokensHeader, s.addTokens); err != nil {
		return nil, err
	}
	slices.SortFunc(s.windows, func(x, y serveGenWindow) int {
		if x.start != y.start {
			return int(x.start - y.start)
		}
		return x.client - y.client
	})
	for i := 1; i < len(s.windows); i++ {
		if s.windows[i].start == s.windows[i-1].start && s.windows[i].client == s.windows[i-1].client {
			return nil, fmt.Errorf("%s: client %d has two windows at %d s", filepath.Join(dir, WindowsFile), s.windows[i].client, s.windows[i].start)
		}
	}
	for _, ct := range s.tokens {
		for _, tws := range [][]tokenWindow{ct.input, ct.output} {
			slices.SortFunc(tws, func(x, y tokenWindow) int { return int(x.start - y.start) })
		}
		s.hasInput = s.hasInput || len(ct.input) > 0
	}
	last := s.windows[len(s.windows)-1].start
	s.days = int((last + WindowSeconds + daySeconds - 1) / daySeconds)
	return s, nil
}

// readCSV reads a CSV file whose header must be want, calling add with
// each line's fields and its line number.
func readCSV(path string, want []string, add func(rec []string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = len(want)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s:1: empty: want the header %s", path, strings.Join(want, ","))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !slices.Equal(header, want) {
		return fmt.Errorf("%s:1: header %s, want %s", path, strings.Join(header, ","), strings.Join(want, ","))
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := add(rec); err != nil {
			line, _ := cr.FieldPos(0)
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
}

func parseClientStart(client, start string, grid int64) (int, int64, error) {
	c, err := strconv.Atoi(client)
	if err != nil || c < 0 {
		return 0, 0, fmt.Errorf("client %q is not a number >= 0", client)
	}
	st, err := strconv.ParseInt(start, 10, 64)
	if err != nil || st < 0 || st%grid != 0 {
		return 0, 0, fmt.Errorf("start_s %q is not a multiple of %d s >= 0", start, grid)
	}
	return c, st, nil
}

func parseNumber(name, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %q is not a number >= 0", name, s)
	}
	return v, nil
}

func (s *ServeGen) addWindow(rec []string) error {
	c, start, err := parseClientStart(rec[0], rec[1], WindowSeconds)
	if err != nil {
		return err
	}
	rate, err := parseNumber("rate", rec[2])
	if err != nil {
		return err
	}
	if _, err := parseNumber("cv", rec[3]); err != nil {
		return err
	}
	if rate == 0 && rec[4] == "" {
		// ServeGen's own files mark a window without requests so.
		return nil
	}
	a, err := strconv.ParseFloat(rec[5], 64)
	if err != nil {
		return fmt.Errorf("a %q is not a number", rec[5])
	}
	b, err := strconv.ParseFloat(rec[6], 64)
	if err != nil {
		return fmt.Errorf("b %q is not a number", rec[6])
	}
	g, err := newGaps(rec[4], a, b)
	if err != nil {
		return err
	}
	s.windows = append(s.windows, serveGenWindow{client: c, start: start, rate: rate, gaps: g})
	return nil
}

func (s *ServeGen) addTokens(rec []string) error {
	// Token windows need not sit on the 6-hour grid: a request takes the
	// latest one that began before it and still covers it.
	c, start, err := parseClientStart(rec[0], rec[1], 1)
	if err != nil {
		return err
	}
	q := make([]float64, len(quantileLevels))
	for i := range q {
		name := "q" + strconv.FormatFloat(quantileLevels[i], 'f', -1, 64)
		if q[i], err = parseNumber(name, rec[3+i]); err != nil {
			return err
		}
		if i > 0 && q[i] < q[i-1] {
			return fmt.Errorf("%s %v is below the quantile before it (%v): quantiles must not decrease", name, q[i], q[i-1])
		}
	}
	ct := s.tokens[c]
	if ct == nil {
		ct = &clientTokens{}
		s.tokens[c] = ct
	}
	var field *[]tokenWindow
	switch rec[2] {
	case "input":
		field = &ct.input
	case "output":
		field = &ct.output
	default:
		return fmt.Errorf("field %q: want input or output", rec[2])
	}
	for _, tw := range *field {
		if tw.start == start {
			return fmt.Errorf("client %d has two %s windows at %d s", c, rec[2], start)
		}
	}
	*field = append(*field, tokenWindow{start: start, q: q})
	return nil
}

// Days is how many days the windows span, from the data's start.
func (s *ServeGen) Days() int { return s.days }

// hasTokens says whether ServeGen would draw requests for a client: it
// loads only the clients that have token data, and leaves the others out.
func (s *ServeGen) hasTokens(client int) bool {
	ct := s.tokens[client]
	return ct != nil && len(ct.output) > 0 && (!s.hasInput || len(ct.input) > 0)
}

// ServeGenSummary says what Generate drew.
type ServeGenSummary struct {
	// Clients counts the clients with requests in the days drawn.
	Clients int
	// LeftOut are the clients left out because the data give no token
	// quantiles for them, as ServeGen leaves out a client without a
	// dataset, and LeftOutShare is their share of the requests the windows
	// give in those days.
	LeftOut      []int
	LeftOutShare float64
	Requests     int
}

// Generate draws requests from days of the windows, from day first (1 is
// the data's first) on, as ServeGen
// draws them: per client and window, n = ⌈rate × rateScale × 600⌉
// inter-arrival times from the window's distribution, stretched so that
// they sum to the window; the clients' requests merged and sorted; each
// request's input and output tokens drawn from the client's quantiles for
// the 6 hours covering its arrival, linearly between the quantile points.
// The last arrival of a window falls on its end. emit gets the requests in
// order of arrival, window by window, so that a trace of millions of
// requests need not be held; their arrivals count from the start of day
// first. The same arguments give the same requests, and the first days of
// a longer draw are the draw of fewer days. A draw from a later day is
// seeded anew: its requests are not those of the same day in a draw from
// an earlier one, though as many.
func (s *ServeGen) Generate(first, days int, rateScale float64, seed uint64, emit func(Request) error) (ServeGenSummary, error) {
	var sum ServeGenSummary
	switch {
	case first < 1:
		return sum, fmt.Errorf("the first day is 1 or later, got %d", first)
	case days < 1:
		return sum, fmt.Errorf("days must be at least 1, got %d", days)
	case first-1+days > s.days:
		return sum, fmt.Errorf("the windows span %d days, fewer than the %d asked for from day %d", s.days, days, first)
	case !(rateScale > 0) || math.IsInf(rateScale, 0):
		return sum, fmt.Errorf("rate scale must be above 0, got %v", rateScale)
	}
	begin := int64(first-1) * daySeconds
	end := begin + int64(days)*daySeconds
	from := sort.Search(len(s.windows), func(i int) bool { return s.windows[i].start >= begin })
	clients, leftOut := map[int]bool{}, map[int]bool{}
	var all, lost float64
	for _, w := range s.windows[from:] {
		if w.start >= end {
			break
		}
		clients[w.client] = true
		all += w.rate
		if !s.hasTokens(w.client) {
			leftOut[w.client] = true
			lost += w.rate
		}
	}
	sum.Clients = len(clients)
	for c := range leftOut {
		sum.LeftOut = append(sum.LeftOut, c)
	}
	slices.Sort(sum.LeftOut)
	if all > 0 {
		sum.LeftOutShare = lost / all
	}

	// One generator, used window by window in the order of the sorted
	// windows, so that a draw of more days begins with the draw of fewer.
	rng := rand.New(rand.NewPCG(seed, 0x5e7e6e))
	var group []Request
	var offsets []float64
	for i := from; i < len(s.windows) && s.windows[i].start < end; {
		start := s.windows[i].start
		group = group[:0]
		for ; i < len(s.windows) && s.windows[i].start == start; i++ {
			w := s.windows[i]
			if leftOut[w.client] {
				continue
			}
			offsets = offsets[:0]
			for range arrivals(w.rate * rateScale) {
				offsets = append(offsets, w.gaps.logDraw(rng))
			}
			for _, off := range stretch(offsets, WindowSeconds) {
				at := float64(start) + off
				req, err := s.tokensAt(w.client, at, rng)
				if err != nil {
					return sum, err
				}
				req.Arrival = time.Duration(math.Round((at - float64(begin)) * float64(time.Second)))
				group = append(group, req)
			}
		}
		// Every arrival of a window lies within it, so sorting each group
		// of windows that start together sorts the whole trace.
		slices.SortStableFunc(group, func(x, y Request) int {
			return int(x.Arrival - y.Arrival)
		})
		for _, r := range group {
			if err := emit(r); err != nil {
				return sum, err
			}
		}
		sum.Requests += len(group)
	}
	return sum, nil
}

// arrivals is ⌈rate × 600⌉, the number of requests of a window. The rates
// are counts over 600 s written in decimal (0.39 is 234 requests), whose
// product with 600 can land a hair above the count; that hair is not a
// request.
func arrivals(rate float64) int {
	return int(math.Ceil(rate * WindowSeconds * (1 - 1e-12)))
}

// tokensAt draws a request's tokens from the client's quantiles for the
// 6 hours covering the time at (seconds).
func (s *ServeGen) tokensAt(client int, at float64, rng *rand.Rand) (Request, error) {
	ct := s.tokens[client]
	var r Request
	if s.hasInput {
		q, err := covering(ct.input, client, "input", at)
		if err != nil {
			return r, err
		}
		r.InputTokens = int(math.Round(quantileDraw(q, rng.Float64())))
	}
	q, err := covering(ct.output, client, "output", at)
	if err != nil {
		return r, err
	}
	// A request that is served returns at least its first token; a few
	// windows' lowest quantile is 0.
	r.OutputTokens = max(1, int(math.Round(quantileDraw(q, rng.Float64()))))
	return r, nil
}

func covering(tws []tokenWindow, client int, field string, at float64) ([]float64, error) {
	i := sort.Search(len(tws), func(i int) bool { return float64(tws[i].start) > at }) - 1
	if i < 0 || at > float64(tws[i].start+TokenWindowSeconds) {
		return nil, fmt.Errorf("client %d has requests at %v s but no %s token quantiles for the 6 hours covering it", client, at, field)
	}
	return tws[i].q, nil
}

// GenerateServeGen reads the model folder dir and draws days of it from
// day first at rateScale times their rate (see ServeGen.Generate).
func GenerateServeGen(dir string, first, days int, rateScale float64, seed uint64) ([]Request, ServeGenSummary, error) {
	s, err := LoadServeGen(dir)
	if err != nil {
		return nil, ServeGenSummary{}, err
	}
	var reqs []Request
	sum, err := s.Generate(first, days, rateScale, seed, func(r Request) error {
		reqs = append(reqs, r)
		return nil
	})
	return reqs, sum, err
}
