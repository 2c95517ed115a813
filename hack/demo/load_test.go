package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCurveAt(t *testing.T) {
	c := curve{
		{"low", 10 * time.Second, 0.3, 0.3},
		{"ramp", 10 * time.Second, 0.3, 0.9},
		{"drop", 5 * time.Second, 0.2, 0.2},
	}
	cases := []struct {
		elapsed time.Duration
		want    float64
		segment string
	}{
		{-time.Second, 0.3, "low"},
		{0, 0.3, "low"},
		{9 * time.Second, 0.3, "low"},
		{10 * time.Second, 0.3, "ramp"},
		{15 * time.Second, 0.6, "ramp"},
		{19 * time.Second, 0.84, "ramp"},
		{20 * time.Second, 0.2, "drop"},
		{24*time.Second + 999*time.Millisecond, 0.2, "drop"},
		// The curve repeats.
		{25 * time.Second, 0.3, "low"},
		{40 * time.Second, 0.6, "ramp"},
		{25*time.Second*1000 + 15*time.Second, 0.6, "ramp"},
	}
	for _, tc := range cases {
		got, segment := c.at(tc.elapsed)
		if got != tc.want || segment != tc.segment {
			t.Errorf("at(%v) = %v %q, want %v %q", tc.elapsed, got, segment, tc.want, tc.segment)
		}
	}
	if v, segment := (curve{}).at(time.Second); v != 0 || segment != "" {
		t.Errorf("empty curve: at = %v %q, want 0", v, segment)
	}
}

// TestDemoCurve checks that the demo's curve visits every decision the view
// is meant to show: below the down threshold, above the up threshold, and
// in between.
func TestDemoCurve(t *testing.T) {
	if p := demoCurve.period(); p < 2*time.Minute || p > 4*time.Minute {
		t.Errorf("period %v, want 2 to 4 minutes", p)
	}
	var below, above, between bool
	for at := time.Duration(0); at < demoCurve.period(); at += time.Second {
		v, _ := demoCurve.at(at)
		below = below || v < 0.5
		above = above || v > 0.8
		between = between || (v > 0.5 && v < 0.8)
	}
	if !below || !above || !between {
		t.Errorf("curve visits below 0.5: %v, above 0.8: %v, between: %v; want all", below, above, between)
	}
}

func TestLoadServer(t *testing.T) {
	ctx := context.Background()
	s, err := startLoadServer(ctx, curve{{"flat", time.Minute, 0.42, 0.42}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Errorf("URL %s, want a loopback address", s.URL)
	}

	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Data struct {
			LoadBalance float64 `json:"load_balance"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || doc.Data.LoadBalance != 0.42 {
		t.Errorf("got %d with load %v, want 200 with 0.42", resp.StatusCode, doc.Data.LoadBalance)
	}

	other, err := http.Get(strings.TrimSuffix(s.URL, loadIndexPath) + "/other")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, other.Body)
	other.Body.Close()
	if other.StatusCode != http.StatusNotFound {
		t.Errorf("another path answered %d, want 404", other.StatusCode)
	}
}
