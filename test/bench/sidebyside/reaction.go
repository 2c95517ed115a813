package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

const (
	reactName = "react"
	// reactionInterval is the autoscaling interval of the reaction set.
	reactionInterval = 5 * time.Second
	// Loads of the reaction set's Step policy (thresholds 0.8 and 0.5): one
	// that holds the count, one that adds tasks.
	loadHold, loadHigh = 0.6, 0.95
)

// reaction is how long the autoscaler took, from a change of the load index,
// to write the new task count, over several changes.
type reaction struct {
	samples []time.Duration
}

func (r reaction) median() time.Duration {
	if len(r.samples) == 0 {
		return 0
	}
	s := slices.Clone(r.samples)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r reaction) max() time.Duration {
	if len(r.samples) == 0 {
		return 0
	}
	return slices.Max(r.samples)
}

// loadIndex serves {"data":{"load_balance":X}} on 127.0.0.1.
type loadIndex struct {
	srv   *http.Server
	url   string
	value atomic.Uint64 // in thousandths
}

func startLoadIndex() (*loadIndex, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the load index: %w", err)
	}
	li := &loadIndex{url: "http://" + l.Addr().String() + "/load"}
	li.set(loadHold)
	li.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"load_balance":%.3f}}`, float64(li.value.Load())/1000)
	})}
	go func() { _ = li.srv.Serve(l) }()
	return li, nil
}

func (li *loadIndex) set(v float64) { li.value.Store(uint64(v * 1000)) }
func (li *loadIndex) close()        { _ = li.srv.Close() }

// measureReaction creates a small autoscaled set next to the large one and,
// samples times, raises its load index at a random point of the interval
// and times how long the scale write takes to show: with a Step policy the
// autoscaler reads the index once an interval, so the expected median is
// half an interval plus the time to read, decide and write.
func measureReaction(ctx context.Context, cp *framework.ControlPlane, samples int) (reaction, error) {
	var r reaction
	li, err := startLoadIndex()
	if err != nil {
		return r, err
	}
	defer li.close()

	one := intstr.FromInt32(1)
	maxReplicas := int32(2 + 3*samples) // stepUp 3 per sample
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: reactName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: gpuModel, GPUAmount: &one}},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1),
				MaxReplicas: maxReplicas,
				Interval:    &gputaskv1.Duration{Duration: reactionInterval},
				Metrics:     []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: li.url}}},
				Policy:      gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
			},
		},
	}
	sets := cp.GPUTask.GputaskV1().GPUTaskSets(namespace)
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("creating the reaction set: %w", err)
	}
	replicas := int32(1)
	for range samples {
		// Wait until every task is Ready (starting tasks hold scale-up
		// back), then a full interval more and a random part of one, so the
		// change lands anywhere in the autoscaler's cycle.
		if err := waitReactionReady(ctx, cp, replicas); err != nil {
			return r, err
		}
		pause := reactionInterval + rand.N(reactionInterval)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		li.set(loadHigh)
		changed := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 4*reactionInterval, true, func(ctx context.Context) (bool, error) {
			got, err := sets.Get(ctx, reactName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if n := ptr.Deref(got.Spec.Replicas, 1); n != replicas {
				replicas = n
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return r, fmt.Errorf("waiting for the reaction set to scale up from %d: %w", replicas, err)
		}
		r.samples = append(r.samples, time.Since(changed))
		li.set(loadHold)
	}
	return r, nil
}

func waitReactionReady(ctx context.Context, cp *framework.ControlPlane, replicas int32) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cp.GPUTask.GputaskV1().GPUTaskSets(namespace).Get(ctx, reactName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return got.Status.ReadyReplicas == replicas && got.Status.Replicas == replicas, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d Ready tasks of the reaction set: %w", replicas, err)
	}
	return nil
}
