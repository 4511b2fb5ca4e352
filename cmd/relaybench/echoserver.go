package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// roleEchoServer is roleEnv's value for an echo server process: the bare
// transport's baseline of a run on connector processes, one echo server
// per connector process, so that both hold the same connections.
const roleEchoServer = "echo-server"

// echoServerMain serves the echo baseline (echoHandler) on a loopback port
// and prints "listening <ws://…/echo>"; then it answers commands, one per
// stdin line, until stdin ends:
//
//	mem   this process after a forced GC
//	      -> "mem <heap in use> <stack in use> <goroutines> <resident bytes>"
func echoServerMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relaybench echo-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conns := fs.Int("conns", 0, "connections this server will hold (its open-file limit is raised for them)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := raiseFileLimit(*conns); err != nil {
		fmt.Fprintf(stderr, "relaybench echo-server: %v\n", err)
		return 1
	}
	c := &connector{}
	defer c.close()
	mux := http.NewServeMux()
	mux.Handle("/echo", echoHandler())
	addr, err := c.listen(mux)
	if err != nil {
		fmt.Fprintf(stderr, "relaybench echo-server: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "listening ws://%s/echo\n", addr)
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		switch in.Text() {
		case "mem":
			m := snapshot()
			fmt.Fprintf(stdout, "mem %d %d %d %d\n", m.heap, m.stack, m.goroutines, residentBytes("self"))
		default:
			fmt.Fprintf(stdout, "error unknown command %q\n", in.Text())
		}
	}
	return 0
}

// echoServer is the parent's handle on an echo server process.
type echoServer struct {
	lineChild
	url string
}

// startEchoServerProcess starts an echo server process that will hold
// conns connections.
func startEchoServerProcess(conns int) (*echoServer, error) {
	c, err := startChild("echo server process", roleEchoServer, []string{"-conns", strconv.Itoa(conns)}, nil)
	if err != nil {
		return nil, err
	}
	s := &echoServer{lineChild: *c}
	if !s.lines.Scan() {
		_ = s.stop()
		return nil, fmt.Errorf("echo server process ended before listening: %v", s.lines.Err())
	}
	url, ok := strings.CutPrefix(s.lines.Text(), "listening ")
	if !ok {
		_ = s.stop()
		return nil, fmt.Errorf("echo server process said %q, want listening", s.lines.Text())
	}
	s.url = url
	return s, nil
}

// mem reads the echo server's memory after a forced GC.
func (s *echoServer) mem() (procMem, error) {
	f, err := s.call("mem", "mem")
	if err != nil {
		return procMem{}, err
	}
	var v [4]int64
	if len(f) != len(v) {
		return procMem{}, fmt.Errorf("echo server process answered mem %q", f)
	}
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return procMem{}, fmt.Errorf("echo server mem: %w", err)
		}
	}
	return procMem{Heap: float64(v[0]), Stack: float64(v[1]), Goroutines: float64(v[2]), RSS: float64(v[3]), Collected: true}, nil
}
