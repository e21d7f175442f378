package etcdlock

// This file holds the session's slot table: which key names of the session
// are in use in each queue.

// takeSlot returns the lowest slot of scope (a queue and kind) that none of
// the session's keys there uses, and marks it used. A session's key in a
// queue is "<lease>-<slot>": reusing key names keeps etcd's index of deleted
// keys (walked by every read of the queue until compaction) from growing
// with every acquisition.
func (s *Session) takeSlot(scope string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = map[string][]bool{}
	}
	busy := s.slots[scope]
	for i, b := range busy {
		if !b {
			busy[i] = true
			return i
		}
	}
	s.slots[scope] = append(busy, true)
	return len(busy)
}

// freeSlot makes slot of scope reusable: its key is certainly gone and no
// write of unknown outcome can re-create it.
func (s *Session) freeSlot(scope string, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := s.slots[scope]
	if slot < len(busy) {
		busy[slot] = false
	}
	for len(busy) > 0 && !busy[len(busy)-1] {
		busy = busy[:len(busy)-1]
	}
	if len(busy) == 0 {
		delete(s.slots, scope)
	} else {
		s.slots[scope] = busy
	}
}
