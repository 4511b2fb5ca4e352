package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"connector/contract"
)

// tokenCmd mints an upgrade token the way a gateway does, for operators
// testing a gateway's credentials (e.g. with websocat or curl).
func tokenCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("gateway-id", "", "gateway id (GATEWAY_RELAY_ID)")
	secret := fs.String("secret", "", "gateway secret (GATEWAY_RELAY_SECRET)")
	ttl := fs.Duration("ttl", contract.TokenTTL, "token lifetime")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *id == "" || *secret == "" {
		fmt.Fprintln(stderr, "connector token: -gateway-id and -secret are required")
		return 2
	}
	if *ttl <= 0 {
		fmt.Fprintln(stderr, "connector token: -ttl must be positive")
		return 2
	}
	exp := time.Now().Add(*ttl).Unix()
	fmt.Fprintln(stdout, contract.MintToken(*id, *secret, exp))
	return 0
}
