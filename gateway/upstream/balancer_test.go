package upstream_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func TestPickSpreadsLoad(t *testing.T) {
	t.Parallel()
	addrs := fakeAddrs(4)
	_, s := build(t, testOptions(t, nil), cluster("spread", configv1.Protocol_PROTOCOL_HTTP1, addrs...))
	c := s.Cluster("spread")

	const picks = 40000
	got := map[string]int{}
	for range picks {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() error %v", err)
		}
		got[e.Address()]++
		e.Done(upstream.Success)
	}
	want := picks / len(addrs)
	for _, a := range addrs {
		if n := got[a]; n < want*9/10 || n > want*11/10 {
			t.Errorf("endpoint %s got %d of %d picks, want %d ± 10%% (all: %v)", a, n, picks, want, got)
		}
	}
}

func TestPickPrefersLessLoaded(t *testing.T) {
	t.Parallel()
	addrs := fakeAddrs(3)
	_, s := build(t, testOptions(t, nil), cluster("p2c", configv1.Protocol_PROTOCOL_HTTP1, addrs...))
	c := s.Cluster("p2c")

	// One request held on addrs[0]: whenever it is drawn, the other choice
	// has fewer in flight and wins.
	held := pickAddr(t, c, addrs[0])
	got := map[string]int{}
	for range 3000 {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() error %v", err)
		}
		got[e.Address()]++
		e.Done(upstream.Success)
	}
	if got[addrs[0]] != 0 {
		t.Errorf("busy endpoint got %d picks, want 0 (all: %v)", got[addrs[0]], got)
	}
	for _, a := range addrs[1:] {
		if got[a] < 1000 {
			t.Errorf("idle endpoint %s got %d picks, want ~1500 (all: %v)", a, got[a], got)
		}
	}
	if st := status(t, c, addrs[0]); st.InFlight != 1 {
		t.Errorf("InFlight of the held endpoint = %d, want 1", st.InFlight)
	}
	held.Done(upstream.Success)

	// Released, it takes its share again.
	clear(got)
	for range 3000 {
		e, _ := c.Pick()
		got[e.Address()]++
		e.Done(upstream.Success)
	}
	if got[addrs[0]] < 500 {
		t.Errorf("released endpoint got %d picks, want ~1000 (all: %v)", got[addrs[0]], got)
	}
}

func TestPickSingleEndpoint(t *testing.T) {
	t.Parallel()
	_, s := build(t, testOptions(t, nil), cluster("one", configv1.Protocol_PROTOCOL_HTTP1, "192.0.2.1:80"))
	c := s.Cluster("one")
	for range 10 {
		e, err := c.Pick()
		if err != nil || e.Address() != "192.0.2.1:80" {
			t.Fatalf("Pick() = %v, %v, want 192.0.2.1:80", e, err)
		}
		defer e.Done(upstream.Success)
	}
	if st := status(t, c, "192.0.2.1:80"); st.InFlight != 10 {
		t.Errorf("InFlight = %d, want 10", st.InFlight)
	}
}

func TestPickMaxInFlight(t *testing.T) {
	t.Parallel()
	cfg := cluster("capped", configv1.Protocol_PROTOCOL_HTTP1, fakeAddrs(2)...)
	cfg.Pool = &configv1.ConnectionPool{MaxInFlight: 3}
	_, s := build(t, testOptions(t, nil), cfg)
	c := s.Cluster("capped")

	var held []*upstream.Endpoint
	for i := range 3 {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() #%d error %v, want an endpoint", i+1, err)
		}
		held = append(held, e)
	}
	for range 5 {
		if e, err := c.Pick(); !errors.Is(err, upstream.ErrOverloaded) {
			t.Fatalf("Pick() beyond max_in_flight = %v, %v, want ErrOverloaded", e, err)
		}
	}
	var inFlight int64
	for _, st := range c.Endpoints() {
		inFlight += st.InFlight
	}
	if inFlight != 3 {
		t.Errorf("in flight after refusals = %d, want 3", inFlight)
	}
	held[0].Done(upstream.Canceled)
	e, err := c.Pick()
	if err != nil {
		t.Fatalf("Pick() after a Done error %v, want an endpoint", err)
	}
	e.Done(upstream.Success)
	for _, e := range held[1:] {
		e.Done(upstream.Success)
	}
}

// TestPickConcurrent hammers one cluster from many goroutines; under -race
// it checks the hot path, and afterwards that no slot leaked.
func TestPickConcurrent(t *testing.T) {
	t.Parallel()
	cfg := cluster("busy", configv1.Protocol_PROTOCOL_HTTP1, fakeAddrs(8)...)
	cfg.Pool = &configv1.ConnectionPool{MaxInFlight: 16}
	cfg.OutlierDetection = &configv1.OutlierDetection{ConsecutiveFailures: 3}
	_, s := build(t, testOptions(t, newFakeClock()), cfg)
	c := s.Cluster("busy")

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				e, err := c.Pick()
				if err != nil {
					continue
				}
				outcome := upstream.Success
				if (g+i)%7 == 0 {
					outcome = upstream.Failure
				}
				e.Done(outcome)
			}
		})
	}
	wg.Wait()
	for _, st := range c.Endpoints() {
		if st.InFlight != 0 {
			t.Errorf("endpoint %s InFlight = %d after all Done, want 0", st.Address, st.InFlight)
		}
	}
	// All 16 slots are free again.
	var held []*upstream.Endpoint
	for range 16 {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() error %v with every slot free", err)
		}
		held = append(held, e)
	}
	for _, e := range held {
		e.Done(upstream.Canceled)
	}
}

func BenchmarkPickDone(b *testing.B) {
	_, s := build(b, testOptions(b, nil), cluster("bench", configv1.Protocol_PROTOCOL_HTTP1, fakeAddrs(8)...))
	c := s.Cluster("bench")
	b.ReportAllocs()
	for b.Loop() {
		e, err := c.Pick()
		if err != nil {
			b.Fatal(err)
		}
		e.Done(upstream.Success)
	}
}

func BenchmarkPickDoneParallel(b *testing.B) {
	cfg := cluster("bench", configv1.Protocol_PROTOCOL_HTTP1, fakeAddrs(8)...)
	_, s := build(b, testOptions(b, nil), cfg)
	c := s.Cluster("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e, err := c.Pick()
			if err != nil {
				b.Fatal(err)
			}
			e.Done(upstream.Success)
		}
	})
}

func BenchmarkPickDoneParallelMaxInFlight(b *testing.B) {
	cfg := cluster("bench", configv1.Protocol_PROTOCOL_HTTP1, fakeAddrs(8)...)
	cfg.Pool = &configv1.ConnectionPool{MaxInFlight: 1 << 20}
	_, s := build(b, testOptions(b, nil), cfg)
	c := s.Cluster("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e, err := c.Pick()
			if err != nil {
				b.Fatal(err)
			}
			e.Done(upstream.Success)
		}
	})
}
