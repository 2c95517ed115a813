package setplan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// testNow is the fixed "now" of every test in this package.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// rankTask builds a task for the ranking tables: age before testNow, phase,
// whether it has a pod and a node, and an optional deletion cost.
type rankTask struct {
	name   string
	age    time.Duration
	phase  gputaskv1.GPUTaskPhase
	pod    bool
	node   bool
	cost   string
	noCost bool
}

func (r rankTask) build() *gputaskv1.GPUTask {
	t := &gputaskv1.GPUTask{ObjectMeta: metav1.ObjectMeta{
		Name:              r.name,
		Namespace:         "default",
		CreationTimestamp: metav1.NewTime(testNow.Add(-r.age)),
	}}
	t.Status.Phase = r.phase
	if r.pod {
		t.Status.PodName = r.name + "-pod"
	}
	if r.node {
		t.Status.NodeName = "node-1"
	}
	if r.cost != "" {
		t.Annotations = map[string]string{gputaskv1.AnnotationDeletionCost: r.cost}
	}
	return t
}

func buildAll(specs []rankTask) []*gputaskv1.GPUTask {
	out := make([]*gputaskv1.GPUTask, 0, len(specs))
	for _, s := range specs {
		out = append(out, s.build())
	}
	return out
}

func names(tasks []*gputaskv1.GPUTask) []string {
	out := make([]string, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, t.Name)
	}
	return out
}

// running is a Running task on a node.
func running(name string, age time.Duration) rankTask {
	return rankTask{name: name, age: age, phase: gputaskv1.GPUTaskRunning, pod: true, node: true}
}

func TestRankForScaleIn(t *testing.T) {
	tests := []struct {
		name  string
		tasks []rankTask
		want  []string
	}{{
		name:  "empty",
		tasks: nil,
		want:  []string{},
	}, {
		name: "a task without a pod goes before a running one",
		tasks: []rankTask{
			running("run", time.Hour),
			{name: "nopod", age: 2 * time.Hour, phase: gputaskv1.GPUTaskPending},
		},
		want: []string{"nopod", "run"},
	}, {
		name: "a pod without a node goes before a placed pod, whatever the phase",
		tasks: []rankTask{
			{name: "sched", age: time.Minute, phase: gputaskv1.GPUTaskScheduled, pod: true, node: true},
			{name: "unplaced", age: time.Hour, phase: gputaskv1.GPUTaskPending, pod: true},
		},
		want: []string{"unplaced", "sched"},
	}, {
		name: "Pending before Scheduled before Running among placed tasks",
		tasks: []rankTask{
			running("run", time.Minute),
			{name: "sched", age: time.Hour, phase: gputaskv1.GPUTaskScheduled, pod: true, node: true},
			{name: "pend", age: 2 * time.Hour, phase: gputaskv1.GPUTaskPending, pod: true, node: true},
		},
		want: []string{"pend", "sched", "run"},
	}, {
		name: "Failed and Succeeded tasks do no work and go first",
		tasks: []rankTask{
			running("run", time.Minute),
			{name: "ok", age: time.Hour, phase: gputaskv1.GPUTaskSucceeded, pod: true, node: true},
			{name: "bad", age: time.Hour, phase: gputaskv1.GPUTaskFailed, pod: true, node: true},
		},
		want: []string{"bad", "ok", "run"},
	}, {
		name: "a phase with no status yet ranks as Pending",
		tasks: []rankTask{
			{name: "pend", age: time.Minute, phase: gputaskv1.GPUTaskPending, pod: true, node: true},
			{name: "blank", age: time.Hour, pod: true, node: true},
		},
		want: []string{"pend", "blank"},
	}, {
		name: "lower deletion cost first among running tasks",
		tasks: []rankTask{
			{name: "c10", age: time.Minute, phase: gputaskv1.GPUTaskRunning, pod: true, node: true, cost: "10"},
			{name: "cneg", age: time.Hour, phase: gputaskv1.GPUTaskRunning, pod: true, node: true, cost: "-5"},
			running("c0", 2*time.Minute),
		},
		want: []string{"cneg", "c0", "c10"},
	}, {
		name: "an invalid deletion cost counts as zero",
		tasks: []rankTask{
			{name: "bad", age: time.Hour, phase: gputaskv1.GPUTaskRunning, pod: true, node: true, cost: "cheap"},
			{name: "one", age: time.Minute, phase: gputaskv1.GPUTaskRunning, pod: true, node: true, cost: "1"},
			running("none", 2*time.Hour),
		},
		want: []string{"bad", "none", "one"},
	}, {
		name: "placement beats deletion cost",
		tasks: []rankTask{
			{name: "cheap", age: time.Hour, phase: gputaskv1.GPUTaskRunning, pod: true, node: true, cost: "-100"},
			{name: "nopod", age: time.Hour, phase: gputaskv1.GPUTaskPending, cost: "100"},
		},
		want: []string{"nopod", "cheap"},
	}, {
		name: "younger first when all else is equal",
		tasks: []rankTask{
			running("old", 3*time.Hour),
			running("young", time.Minute),
			running("mid", time.Hour),
		},
		want: []string{"young", "mid", "old"},
	}, {
		name: "name breaks a full tie, so the order is stable",
		tasks: []rankTask{
			running("b", time.Hour),
			running("a", time.Hour),
		},
		want: []string{"a", "b"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := buildAll(tc.tasks)
			before := names(in)
			got := names(RankForScaleIn(in, nil))
			if !slices.Equal(got, tc.want) {
				t.Errorf("RankForScaleIn() = %v, want %v", got, tc.want)
			}
			if !slices.Equal(names(in), before) {
				t.Errorf("RankForScaleIn() reordered its input: %v, was %v", names(in), before)
			}
		})
	}
}

func TestChooseVictims(t *testing.T) {
	tests := []struct {
		name           string
		tasks          []rankTask
		count          int
		minAge         time.Duration
		wantVictims    []string
		wantHeldBack   int32
		wantRetryAfter time.Duration
	}{{
		name:        "nothing to remove",
		tasks:       []rankTask{running("a", time.Hour)},
		count:       0,
		wantVictims: nil,
	}, {
		name:        "takes the best victims in rank order",
		tasks:       []rankTask{running("old", time.Hour), running("young", time.Minute), {name: "nopod", phase: gputaskv1.GPUTaskPending}},
		count:       2,
		wantVictims: []string{"nopod", "young"},
	}, {
		name:        "no minAge protects nothing",
		tasks:       []rankTask{running("young", time.Second)},
		count:       1,
		wantVictims: []string{"young"},
	}, {
		name:        "a young running task is skipped and an old one taken instead",
		tasks:       []rankTask{running("old", time.Hour), running("young", time.Minute)},
		count:       1,
		minAge:      5 * time.Minute,
		wantVictims: []string{"old"},
	}, {
		name:        "tasks that are not running yet are never protected",
		tasks:       []rankTask{{name: "pend", age: time.Second, phase: gputaskv1.GPUTaskPending}, {name: "sched", age: time.Second, phase: gputaskv1.GPUTaskScheduled, pod: true, node: true}},
		count:       2,
		minAge:      time.Hour,
		wantVictims: []string{"pend", "sched"},
	}, {
		name:           "only protected tasks left: hold back and retry when the oldest comes of age",
		tasks:          []rankTask{running("a", time.Minute), running("b", 2*time.Minute), running("c", 4*time.Minute)},
		count:          2,
		minAge:         5 * time.Minute,
		wantVictims:    nil,
		wantHeldBack:   2,
		wantRetryAfter: time.Minute,
	}, {
		name:           "partly held back",
		tasks:          []rankTask{running("old", time.Hour), running("young", 30*time.Second), {name: "nopod", phase: gputaskv1.GPUTaskPending}},
		count:          3,
		minAge:         time.Minute,
		wantVictims:    []string{"nopod", "old"},
		wantHeldBack:   1,
		wantRetryAfter: 30 * time.Second,
	}, {
		name:        "a task exactly minAge old is no longer protected",
		tasks:       []rankTask{running("edge", 5*time.Minute)},
		count:       1,
		minAge:      5 * time.Minute,
		wantVictims: []string{"edge"},
	}, {
		name:           "asking for more than exist holds back only what exists",
		tasks:          []rankTask{running("a", time.Minute)},
		count:          3,
		minAge:         5 * time.Minute,
		wantHeldBack:   1,
		wantRetryAfter: 4 * time.Minute,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseVictims(buildAll(tc.tasks), tc.count, tc.minAge, testNow, nil)
			if gotNames := names(got.Victims); !slices.Equal(gotNames, tc.wantVictims) {
				t.Errorf("victims = %v, want %v", gotNames, tc.wantVictims)
			}
			if got.HeldBack != tc.wantHeldBack {
				t.Errorf("heldBack = %d, want %d", got.HeldBack, tc.wantHeldBack)
			}
			if got.RetryAfter != tc.wantRetryAfter {
				t.Errorf("retryAfter = %v, want %v", got.RetryAfter, tc.wantRetryAfter)
			}
		})
	}
}

func TestDeletionCost(t *testing.T) {
	tests := []struct {
		value string
		set   bool
		want  int32
	}{
		{set: false, want: 0},
		{value: "7", set: true, want: 7},
		{value: "-3", set: true, want: -3},
		{value: "", set: true, want: 0},
		{value: "1.5", set: true, want: 0},
		{value: "abc", set: true, want: 0},
		{value: "2147483647", set: true, want: 2147483647},
		{value: "2147483648", set: true, want: 0},
	}
	for _, tc := range tests {
		task := &gputaskv1.GPUTask{}
		if tc.set {
			task.Annotations = map[string]string{gputaskv1.AnnotationDeletionCost: tc.value}
		}
		if got := DeletionCost(task); got != tc.want {
			t.Errorf("DeletionCost(%q, set=%v) = %d, want %d", tc.value, tc.set, got, tc.want)
		}
	}
}

// FuzzChooseVictims checks the invariants that must hold for any input: no
// more victims than asked, no protected task among them, and held-back plus
// victims never more than asked.
func FuzzChooseVictims(f *testing.F) {
	f.Add(uint8(5), uint8(2), uint16(300), uint64(0x1234))
	f.Fuzz(func(t *testing.T, n, count uint8, minAgeSec uint16, seed uint64) {
		tasks := make([]*gputaskv1.GPUTask, 0, n%32)
		for i := range int(n % 32) {
			bits := seed >> (i % 60)
			phase := []gputaskv1.GPUTaskPhase{"", gputaskv1.GPUTaskPending, gputaskv1.GPUTaskScheduled, gputaskv1.GPUTaskRunning, gputaskv1.GPUTaskFailed}[bits%5]
			r := rankTask{name: string(rune('a'+i%26)) + string(rune('a'+i/26)), age: time.Duration(bits%900) * time.Second, phase: phase, pod: bits&8 != 0, node: bits&16 != 0}
			tasks = append(tasks, r.build())
		}
		minAge := time.Duration(minAgeSec) * time.Second
		got := ChooseVictims(tasks, int(count), minAge, testNow, nil)
		if len(got.Victims) > int(count) || len(got.Victims)+int(got.HeldBack) > int(count) {
			t.Fatalf("victims %d + heldBack %d exceed count %d", len(got.Victims), got.HeldBack, count)
		}
		for _, v := range got.Victims {
			if _, protected := protectedUntil(v, minAge, testNow); protected {
				t.Fatalf("victim %s is protected by minTaskAge", v.Name)
			}
		}
		if got.HeldBack > 0 && got.RetryAfter <= 0 {
			t.Fatalf("held back %d with no retry time", got.HeldBack)
		}
	})
}

// BenchmarkChooseVictims ranks a pool of 1,000 tasks of mixed phases, ages and
// deletion costs and picks 100 victims. Target: well under 1ms, so even a
// large set's scale-in costs nothing next to the API calls it makes.
func BenchmarkChooseVictims(b *testing.B) {
	phases := []gputaskv1.GPUTaskPhase{"", gputaskv1.GPUTaskPending, gputaskv1.GPUTaskScheduled, gputaskv1.GPUTaskRunning, gputaskv1.GPUTaskRunning, gputaskv1.GPUTaskRunning}
	tasks := make([]*gputaskv1.GPUTask, 0, 1000)
	for i := range 1000 {
		r := rankTask{name: fmt.Sprintf("t-%04d", i), age: time.Duration(i%900) * time.Second,
			phase: phases[i%len(phases)], pod: i%7 != 0, node: i%5 != 0}
		task := r.build()
		if i%3 == 0 {
			task.Annotations = map[string]string{gputaskv1.AnnotationDeletionCost: fmt.Sprint(i % 11)}
		}
		tasks = append(tasks, task)
	}
	for b.Loop() {
		ChooseVictims(tasks, 100, 5*time.Minute, testNow, nil)
	}
}
