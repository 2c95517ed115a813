package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// servegenFolder writes a tiny ServeGen model folder: two clients over
// the first hour, one with token quantiles and one without.
func servegenFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	windows := "client,start_s,rate,cv,pattern,a,b\n"
	for start := 0; start < 3600; start += 600 {
		windows += fmt.Sprintf("0,%d,0.5,1.4,Gamma,0.5,4\n1,%d,0.2,0.8,Weibull,1.3,5.4\n", start, start)
	}
	tokens := "client,start_s,field,q0,q5,q10,q15,q20,q25,q30,q35,q40,q45,q50,q55,q60,q65,q70,q75,q80,q85,q90,q95,q96,q97,q98,q99,q99.5,q99.9,q100\n" +
		"0,0,input,10,20,30,40,50,60,70,80,90,100,110,120,130,140,150,160,170,180,190,200,210,220,230,240,250,260,270\n" +
		"0,0,output,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27\n"
	for name, body := range map[string]string{"windows.csv": windows, "tokens.csv": tokens} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// generate --servegen writes a trace, the same for the same seed, that the
// replay reads with the flags of the synthetic traces.
func TestGenerateServeGenAndReplay(t *testing.T) {
	folder, dir := servegenFolder(t), t.TempDir()
	trace := filepath.Join(dir, "sg.csv")
	var out, errOut bytes.Buffer
	args := []string{"generate", "--servegen", folder, "--days", "1", "--rate-scale", "2", "--seed", "3", "--out", trace}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("generate: %v\n%s", err, errOut.String())
	}
	// Client 0 alone: 6 windows of ⌈0.5 × 2 × 600⌉ = 600 requests.
	if want := "3600 requests from 2 clients over 1 days from day 1 at 2 times their rate; 1 clients without token data left out"; !strings.Contains(errOut.String(), want) {
		t.Errorf("generate said %q, want %q", errOut.String(), want)
	}
	first, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(first), "\n"); lines != 3601 || !strings.HasPrefix(string(first), "Timestamp,Request tokens,Response tokens\n") {
		t.Errorf("trace of %d lines beginning %.60q, want the header and 3600 requests", lines, first)
	}
	out.Reset()
	if err := run(args[:len(args)-2], &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(first) {
		t.Error("a second draw with the same seed, to standard output, differs")
	}

	out.Reset()
	replayArgs := []string{
		"--trace", trace, "--time-column", "Timestamp",
		"--input-tokens-column", "Request tokens", "--output-tokens-column", "Response tokens",
		"--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--policies", "oracle", "--gpus-per-node", "0",
	}
	if err := run(replayArgs, &out, &errOut); err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "sg.csv: 3600 requests over") || !strings.Contains(out.String(), "oracle") {
		t.Errorf("replay printed:\n%s", out.String())
	}
}

// A .jsonl trace is read as Mooncake's, with no time column, beside a CSV
// one in the same run.
func TestReplayMooncake(t *testing.T) {
	dir := t.TempDir()
	jsonl, csv := filepath.Join(dir, "mc.jsonl"), filepath.Join(dir, "same.csv")
	var j, c strings.Builder
	c.WriteString("Timestamp,Request tokens,Response tokens\n")
	for i := range 400 {
		fmt.Fprintf(&j, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%d]}`+"\n", i*1500, 500+i, 2000+i%500, i)
		fmt.Fprintf(&c, "%.3f,%d,%d\n", float64(i)*1.5, 500+i, 2000+i%500)
	}
	for path, body := range map[string]string{jsonl: j.String(), csv: c.String()} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	args := []string{
		"--trace", jsonl, "--trace", csv, "--time-column", "Timestamp",
		"--input-tokens-column", "Request tokens", "--output-tokens-column", "Response tokens",
		"--prefill-tokens-per-second", "4000", "--decode-tokens-per-second", "40",
		"--concurrency", "8", "--policies", "oracle", "--gpus-per-node", "0",
	}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut.String())
	}
	// The same requests, some 35 in flight, give the same table.
	tables := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	if len(tables) != 2 || !strings.HasPrefix(tables[0], "mc.jsonl: 400 requests over 9m59s") ||
		strings.SplitN(tables[0], "\n", 2)[1] != strings.SplitN(tables[1], "\n", 2)[1] {
		t.Errorf("replay printed:\n%s", out.String())
	}
	// Without --time-column the JSONL trace alone still plays; the CSV one
	// says what it lacks.
	if err := run(append([]string{"--trace", jsonl}, args[6:]...), &out, &errOut); err != nil {
		t.Errorf("a JSONL trace without --time-column: %v", err)
	}
	if err := run(append([]string{"--trace", csv}, args[6:]...), &out, &errOut); err == nil || !strings.Contains(err.Error(), "no time column") {
		t.Errorf("a CSV trace without --time-column: error %v", err)
	}
}

func TestGenerateServeGenFlagErrors(t *testing.T) {
	folder := servegenFolder(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--servegen", folder, "--shape", "flash"}, "--shape does not go with --servegen"},
		{[]string{"--servegen", folder, "--peak-rate", "3"}, "--peak-rate does not go with --servegen"},
		{[]string{"--shape", "flash", "--days", "2"}, "--days, --first-day and --rate-scale go with --servegen"},
		{[]string{"--shape", "flash", "--first-day", "2"}, "--days, --first-day and --rate-scale go with --servegen"},
		{[]string{"--servegen", folder, "--days", "2"}, "span 1 days, fewer than the 2 asked for from day 1"},
		{[]string{"--servegen", folder, "--first-day", "2"}, "span 1 days, fewer than the 1 asked for from day 2"},
		{[]string{"--servegen", folder, "--rate-scale", "0"}, "rate scale must be above 0"},
		{[]string{"--servegen", filepath.Join(folder, "none")}, "windows.csv"},
	} {
		var out, errOut bytes.Buffer
		err := run(append([]string{"generate"}, tc.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}
