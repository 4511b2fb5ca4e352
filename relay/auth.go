package relay

import (
	"errors"

	"connector/contract"
)

// errUnknownGateway reports a well-formed token naming no configured gateway.
// It is logged, never sent: the close reason is always "unauthorized".
var errUnknownGateway = errors.New("unknown gateway id")

// unknownGatewaySecrets is checked against tokens of unknown gateways so that
// a refusal takes as long as a wrong signature, and token timing never tells
// which gateway ids exist.
var unknownGatewaySecrets = []string{"\x00unknown-gateway"}

// authenticate verifies the Authorization header of an upgrade and returns
// the gateway it authenticates, and the gateway id the token claims (empty
// when there is no readable token) for the log. Errors never carry the
// token or a secret.
func (s *Server) authenticate(header string) (gw *gatewayRecord, claimed string, err error) {
	raw, err := contract.BearerToken(header)
	if err != nil {
		return nil, "", err
	}
	tok, err := contract.ParseToken(raw)
	if err != nil {
		return nil, "", err
	}
	gw = s.gateways[tok.GatewayID]
	secrets := unknownGatewaySecrets
	if gw != nil {
		secrets = gw.secrets
	}
	err = tok.Verify(secrets, s.cfg.Now(), s.cfg.ClockSkew)
	if gw == nil {
		return nil, tok.GatewayID, errUnknownGateway
	}
	if err != nil {
		return nil, tok.GatewayID, err
	}
	return gw, tok.GatewayID, nil
}
