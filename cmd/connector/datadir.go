package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The data directory holds what the connector keeps across restarts: the
// embedded store's file (buffered inbound, interaction tokens) and, on
// embedded defaults, the gateway secret and nexscope token it generates, so
// a local gateway keeps connecting after a restart (the gateway stops
// dialing for good after a 4401 that follows a handshake). It is chosen by
// dataDir, in this order: the -data-dir flag, $CONNECTOR_DATA_DIR,
// store.path, $XDG_STATE_HOME/connector, ~/.local/state/connector.
const envDataDir = "CONNECTOR_DATA_DIR"

// Files in the data directory.
const (
	gatewaySecretFile = "gateway-secret"
	nexscopeTokenFile = "nexscope-token"
)

// dataDir returns the data directory: flagValue when set, else
// $CONNECTOR_DATA_DIR, else configValue (store.path), else the state
// directory of the environment (lookup is os.LookupEnv in production).
func dataDir(flagValue, configValue string, lookup func(string) (string, bool)) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v, ok := lookup(envDataDir); ok && v != "" {
		return v, nil
	}
	if configValue != "" {
		return configValue, nil
	}
	// The XDG base directory spec ignores a relative path.
	if v, ok := lookup("XDG_STATE_HOME"); ok && filepath.IsAbs(v) {
		return filepath.Join(v, "connector"), nil
	}
	if v, ok := lookup("HOME"); ok && v != "" {
		return filepath.Join(v, ".local", "state", "connector"), nil
	}
	return "", fmt.Errorf("no data directory: set %s (or -data-dir), XDG_STATE_HOME or HOME", envDataDir)
}

// storedSecret returns the secret in file name of dir, generating and
// storing one (creating dir, mode 0700) on first use. The file is written
// whole with mode 0600 under a temporary name and then linked into place, so
// neither a crash nor a concurrent start leaves a partial secret, and a
// stored secret is never replaced.
func storedSecret(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if s, err := readSecret(path); !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	secret := rand.Text() // 128 random bits
	err := writeFile(path, os.Link, func(f *os.File) error {
		_, err := f.WriteString(secret + "\n")
		return err
	})
	switch {
	case errors.Is(err, fs.ErrExist):
		return readSecret(path) // another start stored one first
	case err != nil:
		return "", fmt.Errorf("data directory: %w", err)
	}
	return secret, nil
}

// readSecret reads a stored secret. Errors name the file, never its content.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("data directory: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("data directory: %s does not hold one secret; delete it to generate a new one", path)
	}
	return s, nil
}

// creatable reports why dir could not be used as a directory of the
// connector's files, nil when it could: it is one, or its nearest
// existing ancestor is, and a directory can be made there. It makes and
// removes one empty temporary directory to find out, so it leaves
// nothing behind (-check).
func creatable(dir string) error {
	d := dir
	for {
		fi, err := os.Stat(d)
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", d)
		}
		if err == nil {
			break
		}
		parent := filepath.Dir(d)
		if !errors.Is(err, fs.ErrNotExist) || parent == d {
			return err
		}
		d = parent
	}
	probe, err := os.MkdirTemp(d, ".connector-check-")
	if err != nil {
		return err
	}
	return os.Remove(probe)
}
