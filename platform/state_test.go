package platform_test

import (
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform"
)

// TestLocalStateKeepsALaterGeneration: a local state holds to
// store.Capabilities.PutUnlessLater as the stores do (store/storetest).
func TestLocalStateKeepsALaterGeneration(t *testing.T) {
	clk := clocktest.New(time.Unix(1_767_225_300, 0))
	s := platform.NewLocalState(8, clk)
	for _, step := range []struct {
		value string
		gen   int64
		want  string
	}{
		{`{"c":20}`, 20, `{"c":20}`},
		{`{"c":10}`, 10, `{"c":20}`},
		{`{"c":30}`, 30, `{"c":30}`},
		{`{}`, 0, `{}`},
	} {
		if stored, err := s.PutUnlessLater(t.Context(), "k", []byte(step.value), step.gen, clk.Now().Add(time.Minute)); err != nil || stored != (step.value == step.want) {
			t.Fatalf("PutUnlessLater(%s) = %v, %v", step.value, stored, err)
		}
		if v, ok, _ := s.Get(t.Context(), "k"); !ok || string(v) != step.want {
			t.Fatalf("after PutUnlessLater(%s): %q, %v; want %s", step.value, v, ok, step.want)
		}
	}
}
