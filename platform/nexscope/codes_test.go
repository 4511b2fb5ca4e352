package nexscope

import (
	"errors"
	"fmt"
	"testing"
)

func TestCloseIsAnError(t *testing.T) {
	for _, tc := range []struct {
		c    Close
		want string
	}{
		{CloseNameTaken, "close 4009 name_taken"},
		{CloseGhostReplaced, "close 4010 replaced by a new connection"},
		{CloseUnauthorized, "close 1008"},
	} {
		if got := tc.c.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.c, got, tc.want)
		}
	}
	var got Close
	if err := fmt.Errorf("join: %w", CloseRoomFull); !errors.As(err, &got) || got != CloseRoomFull {
		t.Fatalf("errors.As found %#v in a wrapped CloseRoomFull", got)
	}
}
