package wire

// This file holds the keeper's schedule: the sessions' keepalives by the
// time they are due (a heap; a session's entry is stale once its seq
// moved on, see keeper.push).

import "time"

// schedEntry is a session's keepalive due at due; seq is the session's
// schedule generation when it was pushed.
type schedEntry struct {
	due time.Time
	s   Kept
	seq uint64
}

type schedHeap []schedEntry

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h schedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *schedHeap) Push(x any)        { *h = append(*h, x.(schedEntry)) }
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
