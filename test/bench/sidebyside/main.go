// Command sidebyside measures the gputask-controller against
// kube-controller-manager's ReplicaSet controller on the same local control
// plane, with the same client limits. It makes three runs:
//
//   - run A: a GPUTaskSet of N one-GPU tasks, driven by bin/gputask-controller;
//   - run B: a ReplicaSet of N equivalent one-GPU pods, driven by
//     kube-controller-manager --controllers=replicaset;
//   - the ceiling: N pods created by a parallel loop with no client limit, the
//     API server's own pace.
//
// Every run gets a fresh control plane (etcd, kube-apiserver, kube-scheduler,
// the housekeeping kube-controller-manager, kwok) and enough large fake GPU
// nodes that capacity never limits. A and B alternate, A B A B, at each
// qps/burst. It prints a markdown table and writes it to BENCH_OUT.
//
// Settings come from the environment, so that `make bench` can pass them:
//
//	BENCH_N       tasks or pods per run (default 1000)
//	BENCH_QPS     qps/burst pairs, comma-separated (default "50/100,500/1000")
//	BENCH_ROUNDS  A B pairs per qps/burst (default 2)
//	BENCH_STEADY  steady-state window after convergence (default 60s)
//	BENCH_CEILING "false" skips the ceiling run
//	BENCH_REACTIONS load changes timed after each GPUTaskSet run (default 10; 0 skips)
//	BENCH_OUT     the report file (default _output/bench.md)
//	BENCH_KEEP    "true" keeps every control plane's directory (logs)
//	BENCH_ARGS    extra gputask-controller flags, space-separated, such as --task-workers=128
//	BENCH_ENV     extra gputask-controller environment, space-separated, such as GOMEMLIMIT=140MiB
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gputask/gputask-controller/test/framework"
)

// settings are the benchmark's parameters.
type settings struct {
	n       int
	limits  []limits
	rounds  int
	steady  time.Duration
	ceiling bool
	// reactions is how many load changes are timed after each GPUTaskSet run.
	reactions int
	out       string
	keep      bool
	// args are extra gputask-controller flags, env extra environment
	// variables ("KEY=value").
	args, env []string
}

// limits are the --kube-api-qps and --kube-api-burst both controllers get.
type limits struct {
	qps, burst int
}

func (l limits) String() string { return fmt.Sprintf("%d/%d", l.qps, l.burst) }

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "sidebyside: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	s, err := readSettings(os.Getenv)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	host, _ := os.Hostname()
	r := &report{settings: s, host: host, started: time.Now()}
	save := func() error { return r.save() }
	if s.ceiling {
		res, err := runCeiling(ctx, s)
		if err != nil {
			return fmt.Errorf("ceiling: %w", err)
		}
		r.add(res)
		if err := save(); err != nil {
			return err
		}
	}
	for _, l := range s.limits {
		for round := 1; round <= s.rounds; round++ {
			for _, kind := range []runKind{kindTaskSet, kindReplicaSet} {
				res, err := runOne(ctx, s, kind, l, round)
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", kind, l, round, err)
				}
				r.add(res)
				if err := save(); err != nil {
					return err
				}
			}
		}
	}
	r.finished = time.Now()
	if err := save(); err != nil {
		return err
	}
	fmt.Print(r.markdown())
	fmt.Fprintf(os.Stderr, "sidebyside: report written to %s\n", s.out)
	return nil
}

func readSettings(getenv func(string) string) (settings, error) {
	s := settings{n: 1000, rounds: 2, steady: 60 * time.Second, ceiling: true, reactions: 10, out: "_output/bench.md"}
	var err error
	if v := getenv("BENCH_N"); v != "" {
		if s.n, err = strconv.Atoi(v); err != nil || s.n < 1 {
			return s, fmt.Errorf("BENCH_N=%q: want a positive integer", v)
		}
	}
	if v := getenv("BENCH_ROUNDS"); v != "" {
		if s.rounds, err = strconv.Atoi(v); err != nil || s.rounds < 1 {
			return s, fmt.Errorf("BENCH_ROUNDS=%q: want a positive integer", v)
		}
	}
	if v := getenv("BENCH_STEADY"); v != "" {
		if s.steady, err = time.ParseDuration(v); err != nil || s.steady < 0 {
			return s, fmt.Errorf("BENCH_STEADY=%q: want a duration such as 60s", v)
		}
	}
	if v := getenv("BENCH_CEILING"); v != "" {
		if s.ceiling, err = strconv.ParseBool(v); err != nil {
			return s, fmt.Errorf("BENCH_CEILING=%q: want true or false", v)
		}
	}
	if v := getenv("BENCH_REACTIONS"); v != "" {
		if s.reactions, err = strconv.Atoi(v); err != nil || s.reactions < 0 {
			return s, fmt.Errorf("BENCH_REACTIONS=%q: want 0 or a positive integer", v)
		}
	}
	if v := getenv("BENCH_KEEP"); v != "" {
		if s.keep, err = strconv.ParseBool(v); err != nil {
			return s, fmt.Errorf("BENCH_KEEP=%q: want true or false", v)
		}
	}
	s.args = strings.Fields(getenv("BENCH_ARGS"))
	s.env = strings.Fields(getenv("BENCH_ENV"))
	for _, kv := range s.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return s, fmt.Errorf("BENCH_ENV=%q: want KEY=value pairs such as GOMEMLIMIT=140MiB", getenv("BENCH_ENV"))
		}
	}
	if v := getenv("BENCH_OUT"); v != "" {
		s.out = v
	}
	qps := getenv("BENCH_QPS")
	if qps == "" {
		qps = "50/100,500/1000"
	}
	for _, pair := range strings.Split(qps, ",") {
		q, b, ok := strings.Cut(strings.TrimSpace(pair), "/")
		var l limits
		l.qps, err = strconv.Atoi(q)
		if ok && err == nil {
			l.burst, err = strconv.Atoi(b)
		}
		if !ok || err != nil || l.qps < 1 || l.burst < 1 {
			return s, fmt.Errorf("BENCH_QPS=%q: want qps/burst pairs such as 50/100,500/1000", qps)
		}
		s.limits = append(s.limits, l)
	}
	if !filepath.IsAbs(s.out) {
		root, err := framework.RepoRoot()
		if err != nil {
			return s, err
		}
		s.out = filepath.Join(root, s.out)
	}
	return s, nil
}

// logf prints progress with the time of day, since the figures depend on
// what else the machine was doing.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
