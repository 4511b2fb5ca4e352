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
	keys := &noKeys
	if gw != nil {
		keys = &gw.keys
	}
	err = tok.Verify(keys, s.cfg.Clock.Now(), contract.TokenWindow{Skew: s.cfg.ClockSkew, MaxLifetime: s.cfg.MaxTokenLifetime})
	if gw == nil {
		return nil, tok.GatewayID, errUnknownGateway
	}
	if err != nil {
		return nil, tok.GatewayID, err
	}
	return gw, tok.GatewayID, nil
}

// AuthenticateBearer verifies an HTTP request's Authorization header with
// the same token scheme, keys and time window as the /relay upgrade, and
// returns the tenant of the gateway it authenticates. The media routes
// (POST /relay/media, GET /relay/media/{id}) use it; the error never
// carries the token or a secret.
func (s *Server) AuthenticateBearer(authorization string) (string, error) {
	gw, _, err := s.authenticate(authorization)
	if err != nil {
		return "", err
	}
	return gw.tenant.id, nil
}
