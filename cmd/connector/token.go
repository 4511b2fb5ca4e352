package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connector/contract"
)

// envTokenSecret holds the gateway secret connector token signs with.
const envTokenSecret = "CONNECTOR_TOKEN_SECRET"

// maxSecretBytes bounds the secret line read from stdin.
const maxSecretBytes = 4096

// stdin is where token reads the secret when the environment has none.
var stdin io.Reader = os.Stdin

// tokenCmd mints an upgrade token the way a gateway does, for operators
// testing a gateway's credentials (e.g. with websocat or curl). The secret
// comes from $CONNECTOR_TOKEN_SECRET, or the first line of stdin, never
// from argv, where other users and the shell history would see it.
func tokenCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("token", "connector token -gateway-id ID [-ttl 300s] < secret-file",
		"Prints an upgrade token for gateway ID (the Authorization bearer of /relay), signed with the\n"+
			"gateway's secret: $"+envTokenSecret+" when set, else the first line of stdin.")
	id := fs.String("gateway-id", "", "gateway id (GATEWAY_RELAY_ID)")
	secretFlag := fs.String("secret", "", "deprecated: puts the secret in argv and shell history; use $"+envTokenSecret+" or stdin")
	ttl := fs.Duration("ttl", contract.TokenTTL, fmt.Sprintf("token lifetime, at most %s (the connector refuses a token that lives longer)", contract.DefaultMaxTokenLifetime))
	if code := parseFlagsOnly(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if *id == "" {
		fmt.Fprintln(stderr, "connector token: -gateway-id is required")
		return 2
	}
	if *ttl <= 0 || *ttl > contract.DefaultMaxTokenLifetime {
		fmt.Fprintf(stderr, "connector token: -ttl must be positive and at most %s: the connector refuses a token that lives longer (close 4401)\n", contract.DefaultMaxTokenLifetime)
		return 2
	}
	secret := *secretFlag
	if secret != "" {
		fmt.Fprintf(stderr, "connector token: -secret is deprecated (argv is visible to other users and kept in shell history); set %s or pipe the secret to stdin\n", envTokenSecret)
	} else if v, ok := os.LookupEnv(envTokenSecret); ok {
		secret = v
	} else {
		var err error
		if secret, err = readSecretLine(stdin); err != nil {
			fmt.Fprintf(stderr, "connector token: reading the secret from stdin: %v\n", err)
			return 2
		}
	}
	if secret == "" {
		fmt.Fprintf(stderr, "connector token: no secret: set %s or write it to stdin\n", envTokenSecret)
		return 2
	}
	exp := time.Now().Add(*ttl).Unix()
	fmt.Fprintln(stdout, contract.MintToken(*id, secret, exp))
	return 0
}

// readSecretLine returns r's first line without its line ending.
func readSecretLine(r io.Reader) (string, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxSecretBytes+1), 512)
	line, err := br.ReadString('\n')
	if err != nil && err != io.EOF {
		return "", err
	}
	if len(line) > maxSecretBytes {
		return "", fmt.Errorf("the first line is longer than %d bytes", maxSecretBytes)
	}
	return strings.TrimRight(line, "\r\n"), nil
}
