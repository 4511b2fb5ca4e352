// Package integration holds the tests that run a platform behind the real
// relay: a fake Discord, Telegram or nexscope client on one side, gateway
// sockets of relay/relaytest on the other. They live here so that no
// platform/... test binary imports relay (TestPlatformsDoNotImportRelay).
package integration
