package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Credentials of the generated config. The attack knows them only to probe
// with a real gateway; the attack connections never authenticate.
const (
	gatewayID      = "attack-probe-gw"
	telegramToken  = "123456:attack-telegram-token"
	telegramSecret = "attack-webhook-secret"
	discordToken   = "attack.discord.token"
)

// child is the connector process under attack.
type child struct {
	cmd        *exec.Cmd
	dir        string
	secret     string
	addr       string // public listener, host:port
	metricsURL string
	done       chan struct{}
}

// startChild writes the config and starts the connector, optionally under
// prlimit, and waits for its banner.
func startChild(o options) (*child, error) {
	dir, err := os.MkdirTemp("", "attack-")
	if err != nil {
		return nil, err
	}
	c := &child{dir: dir, done: make(chan struct{})}
	var b [16]byte
	_, _ = rand.Read(b[:])
	c.secret = hex.EncodeToString(b[:])
	pub, _, _ := ed25519.GenerateKey(nil)
	closed, err := closedPort()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
shutdown_grace: 5s
log: {level: warn, format: text}
tenants:
  - id: attacked
    gateways: [{id: %s, secrets: [%q]}]
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: http://%s
  gateway_url: ws://%s
telegram:
  api_server_url: http://%s
  webhook_url: https://connector.invalid/telegram/webhook
  webhook_secret: %s
`, gatewayID, c.secret, hex.EncodeToString(pub), closed, closed, closed, telegramSecret)
	if !o.Legacy {
		cfg += "ops: {listen: 127.0.0.1:0}\n"
	}
	if o.Modes[0] == modeLedger {
		cfg += fmt.Sprintf("nexscope: {token: %s, bot_name: %s, rooms: [{name: default, tenant: attacked}]}\n", nexscopeToken, nexscopeBot)
	}
	path := filepath.Join(dir, "connector.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	args := []string{o.Connector, "serve", "-config", path, "-data-dir", dir}
	if o.NoFile > 0 {
		n := strconv.Itoa(o.NoFile)
		args = append([]string{"prlimit", "--nofile=" + n + ":" + n, "--"}, args...)
	}
	c.cmd = exec.Command(args[0], args[1:]...)
	c.cmd.Env = append(os.Environ(), "DISCORD_BOT_TOKEN="+discordToken, "TELEGRAM_BOT_TOKEN="+telegramToken)
	c.cmd.Stderr = os.Stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	if err := c.readBanner(stdout); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

var (
	listeningRe = regexp.MustCompile(`listening on https?://(\S+) `)
	metricsRe   = regexp.MustCompile(`(http://\S+/metrics)`)
)

// readBanner reads the connector's stdout banner for its addresses, then
// drains the rest.
func (c *child) readBanner(r io.Reader) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		reported := false
		for sc.Scan() {
			line := sc.Text()
			if m := listeningRe.FindStringSubmatch(line); m != nil {
				c.addr = m[1]
			}
			if m := metricsRe.FindStringSubmatch(line); m != nil && !reported {
				c.metricsURL = m[1]
				reported = true
				found <- nil
			}
		}
		if !reported {
			found <- errors.New("the connector ended without printing its banner")
		}
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("timed out after 30s waiting for the connector's banner")
	}
}

// pid is the connector's pid (prlimit execs it: the same process).
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the connector process ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) fileLimit() string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", c.pid()))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(line)
			if len(f) >= 5 {
				return f[3]
			}
		}
	}
	return "unknown"
}

// stop sends SIGTERM, waits up to 15 s, then kills, and removes the
// config directory.
func (c *child) stop() {
	if c.cmd.Process != nil && !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	_ = os.RemoveAll(c.dir)
}

// sample is one reading of the connector process.
type sample struct {
	FDs        int
	Goroutines int // -1 when /metrics did not answer
	// RSSKiB is VmRSS: AnonKiB (RssAnon, the Go heap and stacks) plus
	// FileKiB (RssFile, mapped files such as the embedded store's) and
	// shared memory.
	RSSKiB, AnonKiB, FileKiB int
	// HeapInuse is go_memstats_heap_inuse_bytes.
	HeapInuse int64
	// Buffered is the sum of connector_buffered_events over tenants.
	Buffered int64
}

func (c *child) sample() sample {
	s := sample{Goroutines: -1}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.pid())); err == nil {
		s.FDs = len(ents)
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid())); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "VmRSS:":
				s.RSSKiB, _ = strconv.Atoi(f[1])
			case "RssAnon:":
				s.AnonKiB, _ = strconv.Atoi(f[1])
			case "RssFile:":
				s.FileKiB, _ = strconv.Atoi(f[1])
			}
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(c.metricsURL)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			s.Goroutines, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			s.HeapInuse = int64(f)
		}
		if strings.HasPrefix(line, "connector_buffered_events{") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				f, _ := strconv.ParseFloat(line[i+1:], 64)
				s.Buffered += int64(f)
			}
		}
	}
	return s
}

// closedPort returns a loopback address nothing listens on.
func closedPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
