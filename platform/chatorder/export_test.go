package chatorder

// Keys reports how many keys have work in flight (for the tests: memory
// follows the chats with work in flight).
func (q *Queue[K]) Keys() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.tails)
}
