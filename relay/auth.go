package relay

import (
	"errors"

	"connector/contract"
)

// errUnknownGateway reports a well-formed token naming no configured gateway.
// It is logged, never sent: the close reason is always "unauthorized".
var errUnknownGateway = errors.New("unknown gateway id")

// noKeys stands in for the keys of an unknown gateway id: checking a token
// against it costs what checking against a real gateway's costs, so token
// timing never tells which gateway ids exist.
var noKeys contract.TokenKeys

// authenticate verifies the Authorization header of an upgrade and returns
// the gateway it authenticates, the key of the secret the token was signed
// with (TokenKeys.Holds tells whether the gateway still has it), and the
// gateway id the token claims (empty when there is no readable token) for
// the log. Errors never carry the token or a secret.
func (s *Server) authenticate(header string) (gw *gatewayRecord, key []byte, claimed string, err error) {
	raw, err := contract.BearerToken(header)
	if err != nil {
		return nil, nil, "", err
	}
	tok, err := contract.ParseToken(raw)
	if err != nil {
		return nil, nil, "", err
	}
	gw = s.gateway(tok.GatewayID)
	keys := &noKeys
	if gw != nil {
		keys = gw.keys.Load()
	}
	key, err = tok.Match(keys, s.cfg.Clock.Now(), contract.TokenWindow{Skew: s.cfg.ClockSkew, MaxLifetime: s.cfg.MaxTokenLifetime})
	if gw == nil {
		return nil, nil, tok.GatewayID, errUnknownGateway
	}
	if err != nil {
		return nil, nil, tok.GatewayID, err
	}
	return gw, key, tok.GatewayID, nil
}

// Authenticate verifies the Authorization header of an HTTP side-channel
// request (POST /relay/policy, the media routes), which carries the same bearer token as an
// upgrade, and returns the gateway's tenant and id, and the key of the
// secret the token was signed with (registry.Registry.GatewayHolds tells
// whether the stored gateway still has it). The error never carries the
// token or a secret.
func (s *Server) Authenticate(header string) (tenant, gatewayID string, key []byte, err error) {
	gw, key, _, err := s.authenticate(header)
	if err != nil {
		return "", "", nil, err
	}
	return gw.tenant.id, gw.id, key, nil
}
