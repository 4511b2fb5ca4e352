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

// lineChild is the parent's handle on a child process it commands one
// stdin line at a time, reading one answer line each.
type lineChild struct {
	name  string // "gateway process", "echo server process"
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// fleetProcess is the parent's handle on a gateway process.
type fleetProcess struct{ lineChild }

// startChild starts this executable in role (named name in errors) with
// args and the extra environment env; it stops at the end of its input.
func startChild(name, role string, args, env []string) (*lineChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
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
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, samplesLineMax)
	return &lineChild{name: name, cmd: cmd, stdin: stdin, lines: lines}, nil
}

// fleetSpan is the part of o's gateways one gateway process connects:
// gateways first..first+count-1, from the loopback source addresses
// 127.0.0.sourceFirst.. (sources of them; 0: the system's choice).
type fleetSpan struct {
	first, count         int
	sourceFirst, sources int
	layout               layout
}

// wholeFleet is every gateway of o in one process.
func wholeFleet(o *options) fleetSpan {
	return fleetSpan{count: o.Gateways, sourceFirst: 1, sources: o.Sources}
}

// samplesLineMax bounds an answer line of the gateway process: a samples
// line carries one number per inbound read.
const samplesLineMax = 64 << 20

// startFleet starts this executable as the gateway process for span of
// o's gateways on relayURL (several comma-separated: gateway i dials the
// (i mod n)th).
func startFleet(o *options, relayURL string, span fleetSpan) (*fleetProcess, error) {
	c, err := startChild("gateway process", roleFleet, []string{"-url", relayURL, "-prefix", o.GatewayPrefix, "-platform", o.helloPlatform(),
		"-gateways", strconv.Itoa(span.count), "-first", strconv.Itoa(span.first), "-workers", strconv.Itoa(o.ConnectWorkers),
		"-sources", strconv.Itoa(span.sources), "-source-first", strconv.Itoa(span.sourceFirst),
		"-tenants", strconv.Itoa(span.layout.tenants), "-affinity=" + strconv.FormatBool(span.layout.affinity)},
		[]string{secretEnv + "=" + o.Secret})
	if err != nil {
		return nil, err
	}
	return &fleetProcess{*c}, nil
}

// call sends one command and returns the fields of the answer, which must
// start with want.
func (f *lineChild) call(want string, cmd ...string) ([]string, error) {
	if _, err := io.WriteString(f.stdin, strings.Join(cmd, " ")+"\n"); err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	if !f.lines.Scan() {
		return nil, fmt.Errorf("%s ended before answering %s: %v", f.name, cmd[0], f.lines.Err())
	}
	fields := strings.Fields(f.lines.Text())
	switch {
	case len(fields) > 0 && fields[0] == want:
		return fields[1:], nil
	case len(fields) > 0 && fields[0] == "error":
		return nil, errors.New(f.name + ": " + strings.Join(fields[1:], " "))
	}
	return nil, fmt.Errorf("%s answered %q to %s", f.name, f.lines.Text(), cmd[0])
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

// received returns how many inbound the gateways read, and how many
// errors they saw, since the last report or samples.
func (f *fleetProcess) received() (n, errs int, err error) {
	fields, err := f.call("received", "received")
	if err != nil {
		return 0, 0, err
	}
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("gateway process answered received %q", fields)
	}
	n, err1 := strconv.Atoi(fields[0])
	errs, err2 := strconv.Atoi(fields[1])
	return n, errs, errors.Join(err1, err2)
}

// samples takes the latencies of the inbound read since the last report
// or samples, and the errors seen.
func (f *fleetProcess) samples() ([]time.Duration, int, error) {
	fields, err := f.call("samples", "samples")
	if err != nil {
		return nil, 0, err
	}
	return parseSamples(fields)
}

// closeGateways closes every gateway connection.
func (f *fleetProcess) closeGateways() error {
	_, err := f.call("closed", "close")
	return err
}

// echoConnect opens n connections to the echo servers at urls
// (comma-separated), spread as the gateways are.
func (f *fleetProcess) echoConnect(urls string, n int) (time.Duration, error) {
	fields, err := f.call("echo-connected", "echo-connect", urls, strconv.Itoa(n))
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

// pid is the process's id.
func (f *lineChild) pid() int { return f.cmd.Process.Pid }

// stop ends the process (it exits at the end of its input).
func (f *lineChild) stop() error {
	_ = f.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		return errors.New(f.name + " did not exit; killed")
	}
}
