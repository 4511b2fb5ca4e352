package store

import (
	"context"
	"fmt"
	"testing"
)

func TestSubscriptionDropsWhenFull(t *testing.T) {
	b := newBroker()
	defer b.close()
	ch, cancel, err := b.Subscribe(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	for i := range SubscriptionBuffer + 10 {
		if err := b.Publish(context.Background(), "c", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range SubscriptionBuffer {
		select {
		case m := <-ch:
			if string(m) != fmt.Sprint(i) {
				t.Fatalf("message %d is %q", i, m)
			}
		default:
			t.Fatalf("message %d is missing: Publish must hand a message to a subscription with room before it returns", i)
		}
	}
	select {
	case m := <-ch:
		t.Fatalf("got %q beyond the buffer of %d: publishing must drop, not queue without bound", m, SubscriptionBuffer)
	default:
	}
}
