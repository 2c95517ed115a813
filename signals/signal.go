// Package signals turns SIGINT and SIGTERM into a cancelled context, so that
// every loop of the controller stops through the same path.
package signals

import (
	"context"
	"os"
	"os/signal"
	"sync"
)

var (
	once      sync.Once
	signalCtx context.Context
)

// SetupSignalContext returns a context that is cancelled on the first SIGINT
// or SIGTERM. A second signal exits the process with code 1 at once, for an
// operator who does not want to wait for a graceful shutdown. Calling it
// again returns the same context rather than installing a second handler.
func SetupSignalContext() context.Context {
	once.Do(func() {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, shutdownSignals...)
		signalCtx = notifyContext(context.Background(), ch, os.Exit)
	})
	return signalCtx
}

// notifyContext cancels the returned context on the first value from ch and
// calls exit(1) on the second. It is split out so a test can drive it without
// sending real signals to the test binary.
func notifyContext(parent context.Context, ch <-chan os.Signal, exit func(int)) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		<-ch
		cancel()
		<-ch
		exit(1)
	}()
	return ctx
}
