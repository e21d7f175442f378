package etcdlock

// This file holds the session's slot table: which key names of the session
// are in use in each queue.

// takeSlot returns the lowest slot of scope (a queue and kind) that none of
// the session's keys there uses, and marks it used. A session's key in a
// queue is "<lease>-<slot>": reusing key names keeps etcd's index of deleted
// keys (walked by every read of the queue until compaction) from growing
// with every acquisition.
func (b *keyBook) takeSlot(scope string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots == nil {
		b.slots = map[string][]bool{}
	}
	busy := b.slots[scope]
	for i, used := range busy {
		if !used {
			busy[i] = true
			return i
		}
	}
	b.slots[scope] = append(busy, true)
	return len(busy)
}

// freeSlot makes slot of scope reusable: its key is certainly gone and no
// write of unknown outcome can re-create it.
func (b *keyBook) freeSlot(scope string, slot int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	busy := b.slots[scope]
	if slot < len(busy) {
		busy[slot] = false
	}
	for len(busy) > 0 && !busy[len(busy)-1] {
		busy = busy[:len(busy)-1]
	}
	if len(busy) == 0 {
		delete(b.slots, scope)
	} else {
		b.slots[scope] = busy
	}
}
