package discord

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// Errors from discordgo and net/http may carry the request URL, and an
// interaction follow-up's URL holds its token. Nothing outside this file
// prints such an error: failed calls become a result or a log attribute
// through describe, which keeps only the status, Discord's error code and
// message, or the class of a network failure (never its URL, address or
// resolver).

// describe is the result of a failed REST call, safe to log and to
// return: it classifies err without ever quoting a URL: the refusals of
// the invalid-request breaker, Discord's error answers, then the failures
// every platform describes alike (platform.CommonFailure: not paced in
// time, no answer before the deadline, the network).
func describe(err error) contract.Result {
	var spent *shareSpentError
	var re *discordgo.RESTError
	switch {
	case errors.As(err, &spent):
		r := contract.Failed(contract.CodeRateLimited, spent.Error())
		r.RetryAfterMS = spent.retryAfter.Milliseconds()
		return r
	case errors.Is(err, errBreakerOpen):
		return contract.Failed(contract.CodeUnavailable, errBreakerOpen.Error())
	case errors.As(err, &re) && re.Response != nil:
		msg := fmt.Sprintf("discord: HTTP %d", re.Response.StatusCode)
		if re.Message != nil && (re.Message.Code != 0 || re.Message.Message != "") {
			msg = fmt.Sprintf("%s (code %d: %s)", msg, re.Message.Code, textsplit.Truncate(re.Message.Message, 200))
		}
		return contract.Failed(contract.CodePlatformError, msg)
	}
	if r, ok := platform.CommonFailure("discord: ", "Discord", err); ok {
		return r
	}
	return contract.Failed(contract.CodePlatformError, "discord request failed")
}

// isNotFound reports a 404 or 403 (a channel the bot cannot see).
func isNotFound(err error) bool {
	var re *discordgo.RESTError
	return errors.As(err, &re) && re.Response != nil &&
		(re.Response.StatusCode == http.StatusNotFound || re.Response.StatusCode == http.StatusForbidden)
}
