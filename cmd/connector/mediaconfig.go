package main

import "fmt"

// validateMedia checks the media section (media.Config).
func (c *Config) validateMedia() error {
	if err := nonNegative("media", &c.Media); err != nil {
		return err
	}
	if err := c.Media.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
