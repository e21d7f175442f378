package etcdlock

import (
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	s1 := openSession(t, nil)
	s2 := openSession(t, nil)
	name := uniqueName(t)
	l1 := mustLock(t, NewMutex(s1, name))
	got := make(chan *Lock, 1)
	go func() {
		l, err := NewMutex(s2, name).Lock(testCtx(t, 30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	if err := l1.Unlock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil || l2.Token() <= l1.Token() {
		t.Fatalf("tokens %v %v", l1.Token(), l2)
	}
	if err := l2.Unlock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}
