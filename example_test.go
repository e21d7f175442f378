package etcdlock_test

import (
	"fmt"

	"github.com/etcdlock/etcdlock"
)

func ExampleFence() {
	// The resource keeps a Fence and checks the token of every write.
	var fence etcdlock.Fence
	write := func(tok etcdlock.Token, what string) {
		if err := fence.Admit(tok); err != nil {
			fmt.Println("rejected", what+":", err)
			return
		}
		fmt.Println("accepted", what)
	}
	write(7, "from the holder with token 7")
	write(9, "from the next holder, token 9")
	// The first holder was paused past its lease and wakes up:
	write(7, "from the paused holder")
	// Output:
	// accepted from the holder with token 7
	// accepted from the next holder, token 9
	// rejected from the paused holder: etcdlock: stale token: token 7, highest admitted 9
}
