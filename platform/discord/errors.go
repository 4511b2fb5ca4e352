package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/netcause"
	"connector/internal/textsplit"
	"connector/platform"
)

// Errors from discordgo and net/http may carry the request URL, and an
// interaction follow-up's URL holds its token. Nothing outside this file
// prints such an error: failed calls become a result or a log attribute
// through describe, which keeps only the status, Discord's error code and
// message, or the class of a network failure (never its URL, address or
// resolver).

// failure is a failed REST call in a form safe to log and to return.
type failure struct {
	code       string
	msg        string
	retryAfter int64 // ms
}

// describe classifies err without ever quoting a URL.
func describe(err error) failure {
	var rl *platform.RateLimitedError
	var spent *shareSpentError
	var re *discordgo.RESTError
	var ue *url.Error
	switch {
	case errors.As(err, &rl):
		return failure{code: contract.CodeRateLimited, msg: "discord " + rl.Error(), retryAfter: rl.Wait.Milliseconds()}
	case errors.As(err, &spent):
		return failure{code: contract.CodeRateLimited, msg: spent.Error(), retryAfter: spent.retryAfter.Milliseconds()}
	case errors.Is(err, errBreakerOpen):
		return failure{code: contract.CodeUnavailable, msg: errBreakerOpen.Error()}
	case errors.As(err, &re) && re.Response != nil:
		msg := fmt.Sprintf("discord: HTTP %d", re.Response.StatusCode)
		if re.Message != nil && (re.Message.Code != 0 || re.Message.Message != "") {
			msg = fmt.Sprintf("%s (code %d: %s)", msg, re.Message.Code, textsplit.Truncate(re.Message.Message, 200))
		}
		return failure{code: contract.CodePlatformError, msg: msg}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return failure{code: contract.CodeUnavailable, msg: "discord request timed out"}
	case errors.As(err, &ue):
		return failure{code: contract.CodeUnavailable, msg: "discord unreachable: " + netcause.Describe(ue.Err)}
	}
	return failure{code: contract.CodePlatformError, msg: "discord request failed"}
}

// isNotFound reports a 404 or 403 (a channel the bot cannot see).
func isNotFound(err error) bool {
	var re *discordgo.RESTError
	return errors.As(err, &re) && re.Response != nil &&
		(re.Response.StatusCode == http.StatusNotFound || re.Response.StatusCode == http.StatusForbidden)
}
