//go:build race

package lockorder

func init() { raceEnabled = true }
