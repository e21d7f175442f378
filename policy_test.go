package etcdlock

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keysAhead builds the keys ahead of a waiter in queue "p", nearest first:
// one key per tag, of leases 1, 2, ...
func keysAhead(tags ...string) []*mvccpb.KeyValue {
	dir := namePrefix("p")
	kvs := make([]*mvccpb.KeyValue, len(tags))
	for i, tag := range tags {
		kvs[i] = &mvccpb.KeyValue{Key: []byte(waiterKey(dir, tag, 1+clientLease(i), 0)), CreateRevision: int64(100 - i)}
	}
	return kvs
}

func clientLease(i int) clientv3.LeaseID { return clientv3.LeaseID(i) }

// TestPolicies: each policy's decision and watch plan, from the keys ahead.
func TestPolicies(t *testing.T) {
	t.Parallel()
	ahead := func(tags ...string) []*mvccpb.KeyValue { return keysAhead(tags...) }
	key := func(kvs []*mvccpb.KeyValue, i int) string { return string(kvs[i].Key) }
	two := ahead(tagMutex, tagMutex)
	sem2 := ahead("s3", "s3")
	sem3 := ahead("s3", "s3", "s3")
	sem4 := ahead("s3", "s3", "s3", "s3")
	readers := ahead(tagReader, tagReader)
	writerBehindReaders := ahead(tagReader, tagWriter, tagReader)
	for _, tc := range []struct {
		name    string
		pol     policy
		ahead   []*mvccpb.KeyValue
		granted bool
		plan    watchPlan
	}{
		{"exclusive, alone", exclusive{}, nil, true, watchPlan{}},
		{"exclusive, behind two", exclusive{}, two, false, watchKey(key(two, 0))},
		{"counting 3, two ahead", counting{n: 3}, sem2, true, watchPlan{}},
		{"counting 3, front waiter", counting{n: 3}, sem3, false,
			watchPlan{set: map[string]bool{key(sem3, 0): true, key(sem3, 1): true, key(sem3, 2): true}}},
		{"counting 3, behind the front", counting{n: 3}, sem4, false, watchPlan{key: key(sem4, 0), puts: true}},
		{"reader, behind readers", readerPolicy{}, readers, true, watchPlan{}},
		{"reader, writer ahead", readerPolicy{}, writerBehindReaders, false, watchKey(key(writerBehindReaders, 1))},
		{"writer, behind readers", exclusive{}, readers, false, watchKey(key(readers, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			granted, plan := tc.pol.decide(tc.ahead)
			if granted != tc.granted || !plan.equal(tc.plan) {
				t.Fatalf("decide = %v, %+v; want %v, %+v", granted, plan, tc.granted, tc.plan)
			}
		})
	}
}

// TestWatchPlanMatters: which events can change a decision.
func TestWatchPlanMatters(t *testing.T) {
	t.Parallel()
	const del, put = mvccpb.DELETE, mvccpb.PUT
	set := watchPlan{set: map[string]bool{"a": true}}
	for _, tc := range []struct {
		name string
		plan watchPlan
		key  string
		typ  mvccpb.Event_EventType
		want bool
	}{
		{"key deleted", watchKey("a"), "a", del, true},
		{"key touched", watchKey("a"), "a", put, false},
		{"key touched, puts matter", watchPlan{key: "a", puts: true}, "a", put, true},
		{"another key", watchKey("a"), "b", del, false},
		{"set member deleted", set, "a", del, true},
		{"set member put", set, "a", put, false},
		{"not in set", set, "b", del, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.plan.matters(tc.key, tc.typ); got != tc.want {
				t.Fatalf("matters(%q, %v) = %v, want %v", tc.key, tc.typ, got, tc.want)
			}
		})
	}
}
