// Package inverted takes two locks in both orders: the lock order check
// must report it.
package inverted

import "sync"

type a struct {
	mu sync.Mutex
	b  *b
}

type b struct{ mu sync.Mutex }

// ab takes a.mu, then b.mu (through a call).
func (x *a) ab() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.b.touch()
}

func (y *b) touch() {
	y.mu.Lock()
	y.mu.Unlock()
}

// ba takes b.mu, then a.mu.
func (y *b) ba(x *a) {
	y.mu.Lock()
	x.mu.Lock()
	x.mu.Unlock()
	y.mu.Unlock()
}
