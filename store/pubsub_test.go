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
		if m := <-ch; string(m) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, m)
		}
	}
	select {
	case m := <-ch:
		t.Fatalf("got %q beyond the buffer of %d: publishing must drop, not queue without bound", m, SubscriptionBuffer)
	default:
	}
}
