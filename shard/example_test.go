package shard_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
)

// A service locks a name on whichever cluster of the deployment owns it;
// only the session is made differently from one cluster's. (Compiled, not
// run: it needs a deployment. tests/shards runs a full one, with a move.)
func ExampleNewSession() {
	ctx := context.Background()
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{"root-1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer root.Close()
	shards, err := shard.New(ctx, root) // reads the slot map and follows it
	if err != nil {
		panic(err)
	}
	defer shards.Close()
	s, err := shard.NewSession(ctx, shards, etcdlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l, err := s.NewMutex("team-a/nightly").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	where, _ := shards.ClusterOf("team-a/nightly")
	fmt.Printf("held on %s, token %v (generation %d)\n", where, l.Token(), l.Token().Generation())
}
