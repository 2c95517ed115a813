package app

import (
	"context"
	"fmt"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	// Registers leader_election_master_status next to the other metrics.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	"k8s.io/klog/v2"
)

// RunWithLeaderElection runs start while this process holds the Lease. Losing
// the lease ends the process, as with every Kubernetes component: the
// controllers' state cannot be trusted to be stopped cleanly mid-sync.
//
// On shutdown (ctx ends) the controllers stop first and the Lease is released
// after: client-go's ReleaseOnCancel requires that the context given to the
// elector outlives the work it guards, or a new leader could start while this
// one still writes.
func RunWithLeaderElection(ctx context.Context, le *Options, cl Clients, watchdog *leaderelection.HealthzAdaptor, start func(context.Context) error) error {
	cfg := le.LeaderElection
	logger := klog.FromContext(ctx)
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("getting hostname for the leader election identity: %w", err)
	}
	identity := hostname + "_" + string(uuid.NewUUID())
	namespace, name := cfg.ResourceNamespace, cfg.ResourceName

	lock, err := resourcelock.New(cfg.ResourceLock, namespace, name,
		cl.Kube.CoreV1(), cl.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the leader election lock: %w", err)
	}

	// The elector's context keeps ctx's values but not its cancellation: it
	// ends when the controllers have stopped, or at once when ctx ends
	// before this process leads.
	electionCtx, cancelElection := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElection()
	var leading leadership
	stopWaiting := context.AfterFunc(ctx, func() {
		if !leading.shutDown() {
			cancelElection()
		}
	})
	defer stopWaiting()

	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration.Duration,
		RenewDeadline:   cfg.RenewDeadline.Duration,
		RetryPeriod:     cfg.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				if !leading.begin() {
					// ctx ended while the lease was being acquired.
					return
				}
				defer leading.done()
				logger.Info("Became leader; starting controllers", "identity", identity)
				// The controllers stop when ctx ends or leadership is lost;
				// only then is the election ended and the Lease released.
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				leading.finish(start(runCtx))
				cancelElection()
			},
			OnStoppedLeading: func() {
				if ctx.Err() != nil || leading.finished() {
					// A shutdown, or the controllers stopped on their own
					// and their error is what Run returns.
					return
				}
				logger.Info("Leader election lost; exiting", "identity", identity)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			},
			OnNewLeader: func(current string) {
				if current != identity {
					logger.Info("New leader elected", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the leader elector: %w", err)
	}
	if watchdog != nil {
		watchdog.SetLeaderElection(elector)
	}
	logger.Info("Waiting for leadership", "lease", klog.KRef(namespace, name), "identity", identity)
	elector.Run(electionCtx)
	return leading.wait()
}

// leadership tracks the controllers started by OnStartedLeading, which the
// elector runs in a goroutine of its own that may start after the election
// ended.
type leadership struct {
	mu       sync.Mutex
	started  bool
	stopping bool
	ended    bool
	// err is what the controllers returned.
	err error
	wg  sync.WaitGroup
}

// begin reports whether the controllers may start, and counts them if so.
func (l *leadership) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return false
	}
	l.started = true
	l.wg.Add(1)
	return true
}

func (l *leadership) done() { l.wg.Done() }

// finish records that the controllers returned, and with what.
func (l *leadership) finish(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended, l.err = true, err
}

// finished reports whether the controllers have returned.
func (l *leadership) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// shutDown forbids a later start, and reports whether the controllers had
// started (they then end the election themselves once they have stopped).
func (l *leadership) shutDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
	return l.started
}

// wait forbids a later start, waits for the controllers to stop, and returns
// their error.
func (l *leadership) wait() error {
	l.shutDown()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
