package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// secretEnv passes the gateway secret to the fleet process; unlike a flag
// it does not show in the process list.
const secretEnv = "RELAYBENCH_SECRET"

// fleetProcess is the parent's handle on the gateway process.
type fleetProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startFleet starts this executable as the gateway process for o's
// gateways on relayURL (several comma-separated: gateway i dials the
// (i mod n)th).
func startFleet(o *options, relayURL string) (*fleetProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-url", relayURL, "-prefix", o.GatewayPrefix, "-platform", o.helloPlatform(),
		"-gateways", strconv.Itoa(o.Gateways), "-workers", strconv.Itoa(o.ConnectWorkers), "-sources", strconv.Itoa(o.Sources))
	cmd.Env = append(os.Environ(), roleEnv+"="+roleFleet, secretEnv+"="+o.Secret)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway process: %w", err)
	}
	return &fleetProcess{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}, nil
}

// call sends one command and returns the fields of the answer, which must
// start with want.
func (f *fleetProcess) call(want string, cmd ...string) ([]string, error) {
	if _, err := io.WriteString(f.stdin, strings.Join(cmd, " ")+"\n"); err != nil {
		return nil, fmt.Errorf("gateway process: %w", err)
	}
	if !f.lines.Scan() {
		return nil, fmt.Errorf("gateway process ended before answering %s: %v", cmd[0], f.lines.Err())
	}
	fields := strings.Fields(f.lines.Text())
	switch {
	case len(fields) > 0 && fields[0] == want:
		return fields[1:], nil
	case len(fields) > 0 && fields[0] == "error":
		return nil, errors.New("gateway process: " + strings.Join(fields[1:], " "))
	}
	return nil, fmt.Errorf("gateway process answered %q to %s", f.lines.Text(), cmd[0])
}

// connect dials every gateway and returns how many failed and how long the
// whole took.
func (f *fleetProcess) connect() (failed int, took time.Duration, err error) {
	fields, err := f.call("connected", "connect")
	if err != nil {
		return 0, 0, err
	}
	ns, _ := strconv.ParseInt(fields[0], 10, 64)
	failed, _ = strconv.Atoi(fields[1])
	return failed, time.Duration(ns), nil
}

// report returns the gateways' stats since the last report.
func (f *fleetProcess) report() (stats, error) {
	fields, err := f.call("stats", "report")
	if err != nil {
		return stats{}, err
	}
	return parseStats(fields)
}

// closeGateways closes every gateway connection.
func (f *fleetProcess) closeGateways() error {
	_, err := f.call("closed", "close")
	return err
}

// echoConnect opens n connections to the echo server at url.
func (f *fleetProcess) echoConnect(url string, n int) (time.Duration, error) {
	fields, err := f.call("echo-connected", "echo-connect", url, strconv.Itoa(n))
	if err != nil {
		return 0, err
	}
	ns, _ := strconv.ParseInt(fields[0], 10, 64)
	return time.Duration(ns), nil
}

// echoRun runs the echo load with messages of size bytes.
func (f *fleetProcess) echoRun(size int, p pacer) (stats, error) {
	fields, err := f.call("echo", "echo-run", strconv.Itoa(size), strconv.FormatFloat(p.Rate, 'f', -1, 64),
		strconv.FormatInt(int64(p.Duration), 10), strconv.Itoa(p.Window))
	if err != nil {
		return stats{}, err
	}
	return parseStats(fields)
}

// pid is the gateway process's id.
func (f *fleetProcess) pid() int { return f.cmd.Process.Pid }

// stop ends the process (it exits at the end of its input).
func (f *fleetProcess) stop() error {
	_ = f.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		return errors.New("gateway process did not exit; killed")
	}
}
