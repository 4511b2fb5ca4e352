package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connector/internal/redistest"
)

// TestSighupWhileStarting: a SIGHUP that reaches the connector while it
// starts (here: while its Redis store opens, held by a proxy until the
// signal is sent) neither ends the process, as the signal's default
// action did (exit 129, nothing logged), nor is lost: once the connector
// runs it reloads the file, which changed before the signal.
func TestSighupWhileStarting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	bin := connectorBinary(t)
	redisURL, arrived, release := heldRedis(t)
	doc := "listen: 127.0.0.1:0\nops: {listen: 127.0.0.1:0}\nstore: {backend: redis, redis_url: \"" + redisURL + "\"}\n" +
		"tenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [gw1-secret-0001]}]\n"
	config := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-config", config, "-data-dir", t.TempDir())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("connector log:\n%s", tail(stderr.String(), 40))
		}
	})
	ops := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "operations (keep private): http://"); ok {
				addr, _, _ := strings.Cut(rest, "/")
				ops <- addr
			}
		}
	}()
	select {
	case <-arrived:
	case <-exited:
		t.Fatalf("the connector exited before it opened its store: %v", cmd.ProcessState)
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to open its store", crashWait)
	}
	if err := os.WriteFile(config, []byte(doc+"  - id: t2\n    gateways: [{id: gw2, secrets: [gw2-secret-0001]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case addr := <-ops:
		waitMetrics(t, "http://"+addr+"/metrics", `connector_config_reloads_total{result="ok"} 1`)
	case <-exited:
		t.Fatalf("a SIGHUP while the connector started ended it: %v", cmd.ProcessState)
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to listen", crashWait)
	}
}

// heldRedis is a redis-server behind a proxy that holds every connection
// until release is closed: a connector using redisURL is starting (opening
// its store) from when arrived is closed until then.
func heldRedis(t *testing.T) (redisURL string, arrived <-chan struct{}, release chan<- struct{}) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			once.Do(func() { close(in) })
			go func() {
				defer c.Close()
				<-out
				up, err := net.Dial("tcp", srv.Addr())
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return "redis://" + ln.Addr().String() + "/0", in, out
}

// TestStopWhileStarting: SIGTERM while the connector starts (its Redis
// store held by a proxy) stops it with status 0 without ever listening:
// stopping is what was asked. Before, the store's cancelled open was
// reported as a failure: "connector stopped" at error level, status 1.
func TestStopWhileStarting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	bin := connectorBinary(t)
	redisURL, arrived, release := heldRedis(t)
	defer close(release)
	doc := "listen: 127.0.0.1:0\nops: {listen: 127.0.0.1:0}\nstore: {backend: redis, redis_url: \"" + redisURL + "\"}\n" +
		"tenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [gw1-secret-0001]}]\n"
	config := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-config", config, "-data-dir", t.TempDir())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-arrived:
	case err := <-exited:
		t.Fatalf("the connector exited before it opened its store: %v\n%s", err, stderr.String())
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to open its store", crashWait)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil || strings.Contains(stdout.String(), "listening") || strings.Contains(stderr.String(), `"level":"ERROR"`) {
			t.Errorf("SIGTERM while starting: %v (want status 0), stdout %q, log:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to stop on SIGTERM", crashWait)
	}
}
