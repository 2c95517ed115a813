package setplan

import (
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// busyTask is a Running task that may be busy, and may be draining since
// drainAgo (0: not draining).
func busyTask(name string, age time.Duration, busy bool, drainAgo time.Duration) *gputaskv1.GPUTask {
	t := running(name, age).build()
	t.Annotations = map[string]string{}
	if busy {
		t.Annotations[gputaskv1.AnnotationBusy] = "true"
	}
	if drainAgo > 0 {
		t.Annotations[gputaskv1.AnnotationDraining] = "true"
		t.Annotations[gputaskv1.AnnotationDrainStartedAt] = testNow.Add(-drainAgo).Format(time.RFC3339)
	}
	return t
}

func TestRankForScaleInPrefersIdle(t *testing.T) {
	tasks := []*gputaskv1.GPUTask{
		busyTask("busy-young", time.Minute, true, 0),
		busyTask("idle-old", time.Hour, false, 0),
		busyTask("busy-old", 2*time.Hour, true, 0),
		busyTask("idle-young", 2*time.Minute, false, 0),
	}
	pending := rankTask{name: "pending", age: time.Hour, phase: gputaskv1.GPUTaskPending, pod: true, node: true}.build()
	pending.Annotations = map[string]string{gputaskv1.AnnotationBusy: "true"}
	tasks = append(tasks, pending)
	cost := busyTask("idle-costly", time.Second, false, 0)
	cost.Annotations[gputaskv1.AnnotationDeletionCost] = "100"
	tasks = append(tasks, cost)

	got := names(RankForScaleIn(tasks, nil))
	// The order of today comes first (a Pending task before Running ones,
	// even when it says busy); among Running tasks idle ones go first, and
	// busy beats a deletion cost.
	want := []string{"pending", "idle-young", "idle-old", "idle-costly", "busy-young", "busy-old"}
	if !slices.Equal(got, want) {
		t.Errorf("RankForScaleIn = %v, want %v", got, want)
	}

	// A busy pod counts as much as a busy task.
	podBusy := func(t *gputaskv1.GPUTask) bool { return t.Name == "idle-young" || gputaskv1.IsBusy(t) }
	got = names(RankForScaleIn(tasks, podBusy))
	want = []string{"pending", "idle-old", "idle-costly", "busy-young", "idle-young", "busy-old"}
	if !slices.Equal(got, want) {
		t.Errorf("RankForScaleIn with busy pods = %v, want %v", got, want)
	}
}

func TestMake(t *testing.T) {
	const timeout = 10 * time.Minute
	tests := []struct {
		name         string
		active       []*gputaskv1.GPUTask
		desired      int
		drainTimeout time.Duration
		create       int
		undrain      []string
		drain        []string
		delete       []string
		draining     int32
		retryAfter   time.Duration
	}{{
		name:    "in sync",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0)},
		desired: 1, drainTimeout: timeout,
	}, {
		name:    "idle victims go at once",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("b", time.Hour, true, 0), busyTask("c", 2*time.Hour, false, 0)},
		desired: 1, drainTimeout: timeout,
		delete: []string{"a", "c"},
	}, {
		name:    "busy victims drain",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, true, 0), busyTask("b", time.Hour, true, 0), busyTask("c", 2*time.Hour, false, 0)},
		desired: 1, drainTimeout: timeout,
		delete: []string{"c"}, drain: []string{"a"}, draining: 1, retryAfter: timeout,
	}, {
		name:    "drain timeout 0 deletes busy victims at once",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, true, 0), busyTask("b", time.Hour, true, 0)},
		desired: 1, drainTimeout: 0,
		delete: []string{"a"},
	}, {
		name:    "a draining task is not replaced",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("d", time.Hour, true, time.Minute)},
		desired: 1, drainTimeout: timeout,
		draining: 1, retryAfter: 9 * time.Minute,
	}, {
		name:    "a drain ends when the worker turns idle",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("d", time.Hour, false, time.Minute)},
		desired: 1, drainTimeout: timeout,
		delete: []string{"d"},
	}, {
		name:    "a drain ends at the timeout",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("d", time.Hour, true, timeout)},
		desired: 1, drainTimeout: timeout,
		delete: []string{"d"},
	}, {
		name:    "scale-up takes drains back before creating",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("d1", time.Hour, true, time.Minute), busyTask("d2", 2*time.Hour, true, time.Minute)},
		desired: 4, drainTimeout: timeout,
		undrain: []string{"d2", "d1"}, create: 1,
	}, {
		name:    "scale-up takes back only what it needs, the oldest drain first",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("d1", time.Hour, true, time.Minute), busyTask("d2", 2*time.Hour, true, time.Minute)},
		desired: 2, drainTimeout: timeout,
		undrain: []string{"d2"}, draining: 1, retryAfter: 9 * time.Minute,
	}, {
		name: "a drain without a start time counts from creation",
		active: []*gputaskv1.GPUTask{func() *gputaskv1.GPUTask {
			t := busyTask("d", time.Hour, true, time.Minute)
			t.Annotations[gputaskv1.AnnotationDrainStartedAt] = "soon"
			return t
		}()},
		desired: 0, drainTimeout: timeout,
		delete: []string{"d"},
	}, {
		name:    "stopped: busy tasks drain, idle ones go",
		active:  []*gputaskv1.GPUTask{busyTask("a", time.Hour, true, 0), busyTask("b", time.Hour, false, 0)},
		desired: 0, drainTimeout: timeout,
		delete: []string{"b"}, drain: []string{"a"}, draining: 1, retryAfter: timeout,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Make(tc.active, tc.desired, nil, tc.drainTimeout, 0, testNow, 500)
			if p.Create != tc.create || p.Draining != tc.draining || p.RetryAfter != tc.retryAfter {
				t.Errorf("create %d draining %d retryAfter %v, want %d %d %v", p.Create, p.Draining, p.RetryAfter, tc.create, tc.draining, tc.retryAfter)
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"undrain", names(p.Undrain), tc.undrain}, {"drain", names(p.Drain), tc.drain}, {"delete", names(p.Delete), tc.delete}} {
				if !slices.Equal(c.got, c.want) && (len(c.got) > 0 || len(c.want) > 0) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestForSet(t *testing.T) {
	young := func(name string, busy bool) *gputaskv1.GPUTask { return busyTask(name, time.Minute, busy, 0) }
	draining := busyTask("d", time.Hour, true, time.Minute)
	tests := []struct {
		name       string
		set        func(*gputaskv1.GPUTaskSet)
		active     []*gputaskv1.GPUTask
		disrupted  DisruptedNodes
		create     int
		drain      []string
		delete     []string
		draining   int32
		heldBack   int32
		retryAfter time.Duration
		// disruptionDrain and disruptionDelete are Plan.Disruption's.
		disruptionDrain, disruptionDelete []string
	}{{
		name:   "unset replicas means one",
		set:    func(s *gputaskv1.GPUTaskSet) { s.Spec.Replicas = nil },
		create: 1,
	}, {
		name:       "minTaskAge protects young Running tasks",
		set:        func(s *gputaskv1.GPUTaskSet) { s.Spec.Replicas = ptr.To[int32](1) },
		active:     []*gputaskv1.GPUTask{young("a", false), young("b", false)},
		heldBack:   1,
		retryAfter: 4 * time.Minute,
	}, {
		name: "stopped: no task is protected, busy ones drain for drainTimeout",
		set: func(s *gputaskv1.GPUTaskSet) {
			s.Annotations = map[string]string{gputaskv1.AnnotationStopped: "true"}
			s.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Duration: 2 * time.Minute}}
		},
		active: []*gputaskv1.GPUTask{young("a", false), young("b", true)},
		delete: []string{"a"}, drain: []string{"b"}, draining: 1, retryAfter: 2 * time.Minute,
	}, {
		name: "invalid spec: removals held, creations go on",
		set: func(s *gputaskv1.GPUTaskSet) {
			s.Spec.Replicas = ptr.To[int32](3)
			s.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Unparsed: `"30"`}}
		},
		active: []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0)},
		create: 2,
	}, {
		name: "invalid spec: nothing deleted or drained, drains still counted, no retry",
		set: func(s *gputaskv1.GPUTaskSet) {
			s.Spec.Replicas = ptr.To[int32](0)
			s.Spec.MinTaskAge = &gputaskv1.Duration{Unparsed: `"5"`}
		},
		active:   []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("b", time.Hour, true, 0), draining},
		draining: 1, heldBack: 2,
	}, {
		name: "invalid spec on a disrupted node: the busy task is marked, the idle one held, replacements created",
		set: func(s *gputaskv1.GPUTaskSet) {
			s.Spec.Replicas = ptr.To[int32](2)
			s.Spec.MinTaskAge = &gputaskv1.Duration{Unparsed: `"5"`}
		},
		active:    []*gputaskv1.GPUTask{busyTask("a", time.Hour, false, 0), busyTask("b", time.Hour, true, 0)},
		disrupted: DisruptedNodes{"node-1": true},
		create:    2, disruptionDrain: []string{"b"}, draining: 1, heldBack: 1,
	}, {
		name:      "minTaskAge does not keep a young task on a disrupted node",
		set:       func(s *gputaskv1.GPUTaskSet) { s.Spec.Replicas = ptr.To[int32](1) },
		active:    []*gputaskv1.GPUTask{young("a", false)},
		disrupted: DisruptedNodes{"node-1": true},
		create:    1, disruptionDelete: []string{"a"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := &gputaskv1.GPUTaskSet{}
			set.Spec.Replicas = ptr.To[int32](0)
			set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: 5 * time.Minute}
			tc.set(set)
			p := ForSet(set, tc.active, nil, tc.disrupted, testNow, DefaultBurstReplicas)
			if p.Create != tc.create || p.Draining != tc.draining || p.HeldBack != tc.heldBack || p.RetryAfter != tc.retryAfter {
				t.Errorf("create %d draining %d heldBack %d retryAfter %v, want %d %d %d %v",
					p.Create, p.Draining, p.HeldBack, p.RetryAfter, tc.create, tc.draining, tc.heldBack, tc.retryAfter)
			}
			if got := names(p.Drain); !slices.Equal(got, tc.drain) && (len(got) > 0 || len(tc.drain) > 0) {
				t.Errorf("drain = %v, want %v", got, tc.drain)
			}
			if got := names(p.Delete); !slices.Equal(got, tc.delete) && (len(got) > 0 || len(tc.delete) > 0) {
				t.Errorf("delete = %v, want %v", got, tc.delete)
			}
			if got := names(p.Disruption.Drain); !slices.Equal(got, tc.disruptionDrain) && (len(got) > 0 || len(tc.disruptionDrain) > 0) {
				t.Errorf("disruption drain = %v, want %v", got, tc.disruptionDrain)
			}
			if got := names(p.Disruption.Delete); !slices.Equal(got, tc.disruptionDelete) && (len(got) > 0 || len(tc.disruptionDelete) > 0) {
				t.Errorf("disruption delete = %v, want %v", got, tc.disruptionDelete)
			}
		})
	}
}

func TestServingAfter(t *testing.T) {
	active := []*gputaskv1.GPUTask{
		busyTask("kept", time.Hour, false, 0), busyTask("deleted", time.Hour, false, 0), busyTask("drained", time.Hour, true, 0),
		busyTask("still-draining", time.Hour, true, time.Minute), busyTask("undrained", time.Hour, true, time.Minute),
	}
	p := Plan{Delete: active[1:2], Drain: active[2:3], Undrain: active[4:5]}
	if got, want := names(p.ServingAfter(active)), []string{"kept", "undrained"}; !slices.Equal(got, want) {
		t.Errorf("ServingAfter() = %v, want %v", got, want)
	}
}
