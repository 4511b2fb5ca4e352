package main

import "connector/platform"

// buildPlatforms constructs every platform the config enables, in the order
// descriptors merge and untagged "relay" outbound is resolved.
func buildPlatforms(cfg *Config, deps platform.Deps) ([]platform.Platform, error) {
	return nil, nil
}

// applyPlatformEnv fills platform credentials from the environment.
func applyPlatformEnv(cfg *Config, gen *generatedSecrets, lookup func(string) (string, bool)) {
}
