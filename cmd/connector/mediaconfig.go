package main

import (
	"fmt"
	"path/filepath"
)

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

// mediaDir is media.dir, else the media directory in dataDir ("" when
// neither is known: no media store).
func mediaDir(dir, dataDir string) string {
	if dir != "" || dataDir == "" {
		return dir
	}
	return filepath.Join(dataDir, "media")
}
