package shards_test

import (
	"context"
	"fmt"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// Names spread over two clusters (package shard): an operator makes the
// deployment once, services make sharded sessions, and a move keeps
// tokens growing.
func Example_shardNewSession() {
	ctx := context.Background()
	clusters, err := embedtest.NewClusters(ctx, 2, embedtest.WithMembers(1))
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, c := range clusters {
			_ = c.Close()
		}
	}()
	root, err := clusters[0].Client()
	if err != nil {
		panic(err)
	}
	defer root.Close()

	// Once, by an operator: the root records the clusters and the slot map.
	err = shard.Create(ctx, root, map[string][]string{
		"eu-1": clusters[0].Endpoints(), "eu-2": clusters[1].Endpoints()})
	if err != nil {
		panic(err)
	}

	// In a service: only the session is made differently.
	shards, err := shard.New(ctx, root)
	if err != nil {
		panic(err)
	}
	defer shards.Close()
	s, err := shard.NewSession(ctx, shards)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	m := s.NewMutex("team-a/nightly")
	l, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	where, _ := shards.ClusterOf(m.Name())
	fmt.Printf("slot %d on %s, generation %d\n", shard.SlotOf(m.Name()), where, l.Token().Generation())
	_ = l.Unlock(ctx)

	// The operator moves the slot; the next grant is on eu-2, with a
	// higher token.
	if err := shards.MoveSlot(ctx, shard.SlotOf(m.Name()), "eu-2", shard.MoveOptions{}); err != nil {
		panic(err)
	}
	l2, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	where, _ = shards.ClusterOf(m.Name())
	fmt.Printf("after the move: on %s, generation %d, token grew: %v\n", where, l2.Token().Generation(), l2.Token() > l.Token())
	_ = l2.Unlock(ctx)
	// Output:
	// slot 904 on eu-1, generation 1
	// after the move: on eu-2, generation 3, token grew: true
}
