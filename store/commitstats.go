package store

import "time"

// Committer is implemented by the backends that write in batches (the
// embedded one: a bbolt transaction per batch; redis: a pipeline per
// batch): what their commits cost, for metrics.
type Committer interface {
	CommitStats() CommitStats
}

// CommitStats counts a backend's batched commits since it opened.
type CommitStats struct {
	// Commits is the batches committed (with or without an error), each
	// counted as its commit starts: a write that returned has its commit
	// counted.
	Commits uint64
	// Writes is the writes they carried.
	Writes uint64
	// Time is the time the commits took, in total.
	Time time.Duration
}

var (
	_ Committer = (*embedded)(nil)
	_ Committer = (*redisStore)(nil)
)

// CommitStats implements Committer: the group commit's transactions.
func (e *embedded) CommitStats() CommitStats { return e.group.stats() }

// CommitStats implements Committer: the write pipelines.
func (s *redisStore) CommitStats() CommitStats { return s.pipe.stats() }
