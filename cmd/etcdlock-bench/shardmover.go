package main

// The mover of the shards scenario's move rows: a child process of the
// bench (run with GOGC=10, so that its GCs mark the live heap often) that
// dials the deployment, moves one slot and reports, one line
// each, the move's phases as they come and then what the move cost it: the
// answers its gRPC clients received (their protobuf size, counted by
// interceptors) and its heap.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// moverEnv names the environment variable that makes the bench a mover;
// it holds the moverArgs as JSON.
const moverEnv = "ETCDLOCK_BENCH_MOVER"

// A bench started with moverEnv set is a mover, and nothing else.
func init() {
	if spec := os.Getenv(moverEnv); spec != "" {
		os.Exit(mover(spec))
	}
}

type moverArgs struct {
	Root []string `json:"root"` // the root cluster's endpoints
	Slot int      `json:"slot"`
	To   string   `json:"to"`
}

// moverResult is what the mover reports of its move.
type moverResult struct {
	Err       string `json:"err,omitempty"`
	Took      int64  `json:"took_ns"`    // the MoveSlot call
	MaxResp   int    `json:"max_resp"`   // the largest answer received, bytes
	MaxMethod string `json:"max_method"` // its gRPC method
	Received  int64  `json:"received"`   // every answer's bytes
	Answers   int    `json:"answers"`
	PeakHeap  uint64 `json:"peak_heap"` // the heap's peak during the move above its size before
	PeakLive  uint64 `json:"peak_live"` // the largest live heap a GC found then, above the one before
	Allocated uint64 `json:"allocated"` // bytes allocated during the move
}

// answers counts the answers a client's gRPC calls and streams receive.
type answers struct {
	mu     sync.Mutex
	max    int
	method string
	total  int64
	n      int
}

func (a *answers) see(method string, m any) {
	pm, ok := m.(proto.Message)
	if !ok {
		return
	}
	n := proto.Size(pm)
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > a.max {
		a.max, a.method = n, method
	}
	a.total += int64(n)
	a.n++
}

func (a *answers) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.max, a.method, a.total, a.n = 0, "", 0, 0
}

func (a *answers) dialOptions() []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			a.see(method, reply)
		}
		return err
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &countedStream{ClientStream: s, a: a, method: method}, nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

type countedStream struct {
	grpc.ClientStream
	a      *answers
	method string
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.a.see(s.method, m)
	}
	return err
}

// mover is the child's main: it prints the phases and the result, and
// returns the process's exit code.
func mover(spec string) int {
	var args moverArgs
	res := moverResult{}
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		res.Err = err.Error()
	} else if err := moveMeasured(args, &res); err != nil {
		res.Err = err.Error()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("result %s\n", b)
	if res.Err != "" {
		return 1
	}
	return 0
}

func moveMeasured(args moverArgs, res *moverResult) error {
	ctx := context.Background()
	a := &answers{}
	cfg := clientv3.Config{Endpoints: args.Root, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: a.dialOptions()}
	root, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer root.Close()
	shards, err := shard.New(ctx, root, shard.WithDialer(
		func(ctx context.Context, _ string, eps []string) (*clientv3.Client, error) {
			c := cfg
			c.Endpoints, c.Context = eps, context.WithoutCancel(ctx)
			return clientv3.New(c)
		}))
	if err != nil {
		return err
	}
	defer shards.Close()
	runtime.GC()
	a.reset()
	base := heapNow()
	peak, stop := heapPeak()
	start := time.Now()
	err = shards.MoveSlot(ctx, args.Slot, args.To, shard.MoveOptions{Progress: func(p shard.MoveProgress) {
		fmt.Printf("phase %s %d\n", p.Phase, time.Now().UnixNano())
	}})
	res.Took = int64(time.Since(start))
	stop()
	res.PeakHeap = max(peak.objects, base.objects) - base.objects
	res.PeakLive = max(peak.live, base.live) - base.live
	res.Allocated = heapNow().allocated - base.allocated
	a.mu.Lock()
	res.MaxResp, res.MaxMethod, res.Received, res.Answers = a.max, a.method, a.total, a.n
	a.mu.Unlock()
	return err
}

var heapSamples = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}

// heap is the mover's heap at one moment.
type heap struct {
	objects   uint64 // the heap's objects, garbage included
	allocated uint64 // allocated so far
	live      uint64 // live as the last GC marked it
}

func heapNow() heap {
	s := slices.Clone(heapSamples)
	metrics.Read(s)
	return heap{s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()}
}

// heapPeak samples the heap every millisecond until stop; *peak holds the
// largest sizes seen (read it after stop).
func heapPeak() (peak *heap, stop func()) {
	peak = new(heap)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			h := heapNow()
			peak.objects, peak.live = max(peak.objects, h.objects), max(peak.live, h.live)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return peak, func() { close(done); <-exited }
}
