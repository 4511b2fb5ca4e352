package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// healthCmd probes a running connector's /healthz, for a container's
// HEALTHCHECK: the distroless image has no shell and no curl. It reads the
// config (and the environment) as serve does to find the operations
// listener, whose /healthz answers while the process serves HTTP.
func healthCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("health", "connector health [-config FILE] [-url URL] [-timeout 5s]",
		"Exits 0 when the connector answers GET /healthz with 200 on its operations listener (ops.listen of the\n"+
			"config file serve reads, or $CONNECTOR_OPS_LISTEN; an address on every interface is probed on\n"+
			"loopback), else prints why and exits 1.")
	configFlag := fs.String("config", "", "YAML config file (default: as serve finds it: $"+envConfigPath+", ./connector.yaml, /etc/connector/connector.yaml)")
	base := fs.String("url", "", "probe URL+/healthz instead, e.g. http://127.0.0.1:9090")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if code := parseFlagsOnly(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	url := strings.TrimSuffix(*base, "/")
	if url == "" {
		addr, err := opsAddress(configPath(*configFlag, defaultConfigSearch, os.LookupEnv), os.LookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "connector health: %v\n", err)
			return 2
		}
		url = "http://" + addr
	}
	url += "/healthz"
	resp, err := (&http.Client{Timeout: *timeout}).Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "connector health: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "connector health: %s answered %s\n", url, resp.Status)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %s\n", url)
	return 0
}

// opsAddress is the operations listener's address as serve would bind it
// from the config file path ("": none) and the environment, with a
// wildcard host (all interfaces) replaced by loopback.
func opsAddress(path string, lookup func(string) (string, bool)) (string, error) {
	cfg, err := readConfig(path, &Config{}, lookup)
	if err != nil {
		return "", err
	}
	cfg.normalizeHTTP()
	host, port, err := net.SplitHostPort(cfg.Ops.Listen)
	if err != nil {
		return "", inFile(path, fmt.Errorf("config: ops.listen: %w", err))
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}
