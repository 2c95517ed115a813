package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"time"
)

// segment is one stretch of the scripted load: the value moves in a straight
// line from `from` to `to` over length.
type segment struct {
	name     string
	length   time.Duration
	from, to float64
}

// curve is a load index that repeats its segments for ever.
type curve []segment

// demoCurve walks the autoscaler through every decision in about three
// minutes: quiet at minReplicas, a ramp that crosses the up threshold (0.8)
// and adds 3 tasks per interval until the GPUs run out, a plateau between
// the thresholds that holds the count, and a drop below the down threshold
// (0.5) that removes one task per interval once the stabilization window
// and minTaskAge allow it.
var demoCurve = curve{
	{"low", 20 * time.Second, 0.3, 0.3},
	{"ramp", 30 * time.Second, 0.3, 0.95},
	{"peak", 25 * time.Second, 0.95, 0.95},
	{"plateau", 45 * time.Second, 0.6, 0.6},
	{"drop", 70 * time.Second, 0.2, 0.2},
}

// period is how long one round of the curve takes.
func (c curve) period() time.Duration {
	var total time.Duration
	for _, s := range c {
		total += s.length
	}
	return total
}

// at returns the load elapsed after the curve started, rounded to two
// decimals as a backend would report it, and the segment's name. Before
// the start it is the first value; an empty curve is 0.
func (c curve) at(elapsed time.Duration) (float64, string) {
	period := c.period()
	if period <= 0 {
		return 0, ""
	}
	elapsed = max(elapsed, 0) % period
	for _, s := range c {
		if elapsed < s.length {
			v := s.from + (s.to-s.from)*float64(elapsed)/float64(s.length)
			return math.Round(v*100) / 100, s.name
		}
		elapsed -= s.length
	}
	// Not reached: elapsed < period.
	last := c[len(c)-1]
	return last.to, last.name
}

// loadServer serves the curve as {"data":{"load_balance":X}} on 127.0.0.1.
type loadServer struct {
	curve   curve
	started time.Time
	srv     *http.Server
	// URL is the endpoint's address.
	URL string
}

// loadIndexPath is where the server answers; any other path is a 404.
const loadIndexPath = "/api/load"

// startLoadServer listens on a free loopback port and serves until Close.
func startLoadServer(ctx context.Context, c curve) (*loadServer, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the load index: %w", err)
	}
	s := &loadServer{curve: c, started: time.Now(), URL: "http://" + ln.Addr().String() + loadIndexPath}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+loadIndexPath, s.serveLoad)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		// Serve only returns ErrServerClosed after Close; anything else
		// leaves the autoscaler failing its reads, which the view shows.
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("load index server stopped: %v\n", err)
		}
	}()
	return s, nil
}

// Now returns the load being served and the curve's segment.
func (s *loadServer) Now() (float64, string) { return s.curve.at(time.Since(s.started)) }

func (s *loadServer) serveLoad(w http.ResponseWriter, _ *http.Request) {
	v, _ := s.Now()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]float64{"load_balance": v}})
}

// Close stops the server at once; the demo is ending.
func (s *loadServer) Close() error { return s.srv.Close() }

// names lists the segments, for the banner: "low 20s, ramp 30s, ...".
func (c curve) names() string {
	parts := make([]string, 0, len(c))
	for _, s := range c {
		parts = append(parts, fmt.Sprintf("%s %v", s.name, s.length))
	}
	return strings.Join(parts, ", ")
}
