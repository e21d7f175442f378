// Package embedtest runs a real etcd cluster inside the test process, with
// controls to crash, restart and isolate members and to cut a client's
// network, for integration tests of code that uses etcd (such as etcdlock).
//
// Every member is a go.etcd.io/etcd/server/v3/embed server with fsync off (see WithFsync),
// a 100 ms heartbeat and a 1 s election timeout (see WithTick), no automatic
// compaction, and quiet logs (see WithLogger). Each member sits behind two
// TCP proxies on 127.0.0.1 ports chosen by the operating system, one for
// clients and one for peers; members advertise the proxy addresses, so the
// addresses stay the same across Member.Kill and Member.Restart while the
// servers themselves listen on fresh ports each time. Clusters never collide
// on ports, so tests in different packages may run at once.
//
// Data lives in a temporary directory (see WithDir). To keep it small,
// the first New of a process lowers etcd's process-wide WAL segment size
// (go.etcd.io/etcd/server/v3/storage/wal.SegmentSizeBytes) from 64 MB to
// 4 MB; other etcd servers started in the same process afterwards get it too.
//
// # One cluster per test
//
// Start builds a cluster for one test and closes it when the test ends:
//
//	func TestFailover(t *testing.T) {
//		c := embedtest.Start(t) // 3 members, closed when the test ends
//		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
//		defer cancel()
//		cli, err := c.Client()
//		if err != nil {
//			t.Fatal(err)
//		}
//		defer cli.Close()
//
//		leader, err := c.WaitLeader(ctx)
//		if err != nil {
//			t.Fatal(err)
//		}
//		if err := leader.Kill(); err != nil { // a crash: no hand-off
//			t.Fatal(err)
//		}
//		// ... the code under test must survive; await the new leader
//		// with c.WaitLeader(ctx) and poll for effects, never sleep ...
//		if err := leader.Restart(); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// # One cluster per package
//
// Starting a cluster takes a second or two; tests that leave it healthy can
// share one. Build it with New in TestMain and Close it before the process
// exits (os.Exit skips deferred calls, so close it explicitly):
//
//	var cluster *embedtest.Cluster
//
//	func TestMain(m *testing.M) {
//		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//		c, err := embedtest.New(ctx)
//		cancel()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		cluster = c
//		code := m.Run()
//		if err := c.Close(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		// With go.uber.org/goleak, check here, after Close:
//		// if code == 0 { if err := goleak.Find(ignores...); err != nil { ...; code = 1 } }
//		os.Exit(code)
//	}
//
// Give each test its own key prefix (UniqueName, or a clientv3/namespace
// client) so tests sharing a cluster cannot see each other's keys;
// Cluster.TestClient gives a test a client closed when it ends, and Context
// bounds its waits. Tests that Kill,
// Isolate or Cut should restore what they broke before returning, or use a
// cluster of their own.
//
// After Close no goroutine of this package remains. etcd and gRPC keep a few
// process-wide background goroutines of their own; the package's tests show
// which ones to ignore with goleak.
//
// # TLS and authentication
//
// WithTLS makes members serve clients over TLS only, with mutual
// authentication and certificates generated fresh at start (TLSFiles,
// ClientTLS); WithAuth enables etcd authentication with a root user;
// WithAuthTokenTTL and WithJWT choose the auth tokens. The Cluster's own
// clients (Client, FlakyClient, Member.Client) then use TLS and log in as
// root; ClientAs logs in as anyone else:
//
//	c := embedtest.Start(t, embedtest.WithTLS(), embedtest.WithAuth("rootpw"))
//	root, err := c.Client() // TLS, as root
//	...
//	_, err = root.RoleAdd(ctx, "team-a")
//	_, err = root.RoleGrantPermission(ctx, "team-a", "team-a/", clientv3.GetPrefixRangeEnd("team-a/"),
//		clientv3.PermissionType(clientv3.PermReadWrite))
//	_, err = root.UserAdd(ctx, "alice", "alicepw")
//	_, err = root.UserGrantRole(ctx, "alice", "team-a")
//	alice, err := c.ClientAs("alice", "alicepw") // TLS, as alice
//
// For a command-line tool under test, TLSFiles gives the PEM files of
// --cacert, --cert and --key. Peer traffic stays plain text; users' passwords
// are hashed with bcrypt's minimum cost, so that logins stay fast.
//
// # Faults
//
//   - Member.Kill crashes a member: its connections are closed, its server is
//     stopped hard, without handing leadership over or draining requests.
//     Member.Restart starts it again from its data, at the same addresses.
//   - Member.Isolate cuts a member from all its peers, both ways, while its
//     client port stays reachable: its clients see a member without a
//     leader. Member.Heal ends it.
//   - Cluster.FlakyClient returns a client that reaches the cluster through a
//     Link. Link.Cut drops that client's traffic silently, as a network
//     partition does (connections stay open, nothing flows); Link.Restore
//     resumes it. Cluster.NewLink makes a Link for clients built elsewhere
//     (another process) on Link.Endpoints.
//   - Link.Hold is a delay-then-deliver fault: a Cut whose held requests
//     the member still serves after Restore although the client gave up on
//     them (timed out, canceled, closed the connection or exited). With a
//     plain Cut, held bytes are delivered too, but a client's cancel or
//     close delivered with them usually stops the member from serving them.
//
// Member.Calls counts the gRPC requests each member received, by method: for
// example, to check that lease keepalives go to the leader.
//
// Under -race on a small machine, keep the default ticks, wait for events
// with generous timeouts, and run cluster-heavy packages one at a time
// (go test -race -p 1).
package embedtest
