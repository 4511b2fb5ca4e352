package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// shutdownSignals is the context serve runs under: SIGINT or SIGTERM
// cancels it, and starts the graceful shutdown; a second one while that
// runs exits the process at once with status 1, leaving in-flight ops
// unanswered. stop releases the signals.
func shutdownSignals(log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	released := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-released:
			return
		}
		cancel()
		select {
		case sig := <-sigs:
			log.Error("second signal: exiting without finishing the shutdown", "signal", sig.String())
			os.Exit(1)
		case <-released:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(released)
		cancel()
	}
}
