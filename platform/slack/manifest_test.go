package slack

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestManifest: deploy/slack-app-manifest.yaml asks for the scopes the
// install flow asks for, points every URL at the connector's routes, and
// subscribes only events the connector reads.
func TestManifest(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/slack-app-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			SlashCommands []struct {
				Command, URL string
			} `yaml:"slash_commands"`
		}
		OAuthConfig struct {
			RedirectURLs []string `yaml:"redirect_urls"`
			Scopes       struct{ Bot []string }
		} `yaml:"oauth_config"`
		Settings struct {
			EventSubscriptions struct {
				RequestURL string   `yaml:"request_url"`
				BotEvents  []string `yaml:"bot_events"`
			} `yaml:"event_subscriptions"`
			Interactivity struct {
				RequestURL string `yaml:"request_url"`
			}
		}
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if scopes := slices.Sorted(slices.Values(m.OAuthConfig.Scopes.Bot)); !slices.Equal(scopes, slices.Sorted(slices.Values(DefaultScopes))) {
		t.Errorf("manifest scopes %v, DefaultScopes %v", scopes, DefaultScopes)
	}
	const host = "https://connector.example.com"
	if m.Settings.EventSubscriptions.RequestURL != host+EventsPath || m.Settings.Interactivity.RequestURL != host+InteractionsPath ||
		!slices.Equal(m.OAuthConfig.RedirectURLs, []string{host + OAuthCallbackPath}) {
		t.Errorf("routes %+v %+v", m.Settings, m.OAuthConfig.RedirectURLs)
	}
	commands := map[string]bool{}
	for _, c := range m.Features.SlashCommands {
		commands[c.Command] = true
		if c.URL != host+CommandsPath {
			t.Errorf("%s posts to %s", c.Command, c.URL)
		}
		if name := strings.TrimPrefix(c.Command, "/"); name != "hermes" && name != "link" && hermesSubcommands[name] == "" {
			t.Errorf("%s is no gateway command", c.Command)
		}
	}
	if !commands["/hermes"] || !commands["/link"] {
		t.Errorf("commands %v", commands)
	}
	read := map[string]bool{"app_mention": true, "app_uninstalled": true, "tokens_revoked": true, "assistant_thread_started": true,
		"assistant_thread_context_changed": true, "message.channels": true, "message.groups": true, "message.im": true, "message.mpim": true}
	for _, ev := range m.Settings.EventSubscriptions.BotEvents {
		if !read[ev] {
			t.Errorf("the manifest subscribes %s, which the connector does not read", ev)
		}
		delete(read, ev)
	}
	if len(read) != 0 {
		t.Errorf("not subscribed: %v", read)
	}
}
