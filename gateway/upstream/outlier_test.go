package upstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

const base = 10 * time.Second

// outlierCluster builds a cluster of n fake endpoints ejected after 3
// failures for base × k.
func outlierCluster(t *testing.T, n int, od *configv1.OutlierDetection) (*upstream.Cluster, *fakeClock, []string) {
	t.Helper()
	clock := newFakeClock()
	addrs := fakeAddrs(n)
	cfg := cluster("outlier", configv1.Protocol_PROTOCOL_HTTP1, addrs...)
	if od == nil {
		od = &configv1.OutlierDetection{}
	}
	od.ConsecutiveFailures = 3
	od.BaseEjectionTime = dur(base)
	cfg.OutlierDetection = od
	_, s := build(t, testOptions(t, clock), cfg)
	return s.Cluster("outlier"), clock, addrs
}

func fail(t *testing.T, c *upstream.Cluster, addr string, n int) {
	t.Helper()
	for range n {
		pickAddr(t, c, addr).Done(upstream.Failure)
	}
}

// neverPicked checks that 1000 picks avoid addr.
func neverPicked(t *testing.T, c *upstream.Cluster, addr string) {
	t.Helper()
	for range 1000 {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() error %v", err)
		}
		e.Done(upstream.Canceled)
		if e.Address() == addr {
			t.Fatalf("Pick() returned ejected endpoint %s", addr)
		}
	}
}

func TestOutlierEjectsAndRevives(t *testing.T) {
	t.Parallel()
	c, clock, addrs := outlierCluster(t, 3, nil)
	bad := addrs[0]

	fail(t, c, bad, 2)
	if st := status(t, c, bad); !st.EjectedUntil.IsZero() {
		t.Fatalf("ejected after 2 failures (until %v), want only after 3", st.EjectedUntil)
	}
	fail(t, c, bad, 1)
	st := status(t, c, bad)
	if want := clock.Now().Add(base); !st.EjectedUntil.Equal(want) {
		t.Fatalf("EjectedUntil after 3 failures = %v, want %v", st.EjectedUntil, want)
	}
	neverPicked(t, c, bad)

	clock.Add(base - time.Nanosecond)
	neverPicked(t, c, bad)
	clock.Add(time.Nanosecond)
	pickAddr(t, c, bad).Done(upstream.Success) // back in rotation
	if st := status(t, c, bad); !st.EjectedUntil.IsZero() {
		t.Errorf("EjectedUntil after expiry = %v, want zero", st.EjectedUntil)
	}

	// Failing again at once: the second ejection lasts twice as long.
	fail(t, c, bad, 3)
	if st, want := status(t, c, bad), clock.Now().Add(2*base); !st.EjectedUntil.Equal(want) {
		t.Fatalf("second EjectedUntil = %v, want %v (2 × base)", st.EjectedUntil, want)
	}
	clock.Add(2 * base)
	fail(t, c, bad, 3)
	if st, want := status(t, c, bad), clock.Now().Add(3*base); !st.EjectedUntil.Equal(want) {
		t.Fatalf("third EjectedUntil = %v, want %v (3 × base)", st.EjectedUntil, want)
	}
}

func TestOutlierEjectionCappedAndDecays(t *testing.T) {
	t.Parallel()
	c, clock, addrs := outlierCluster(t, 2, nil)
	bad := addrs[0]
	for k := 1; k <= 12; k++ {
		fail(t, c, bad, 3)
		st := status(t, c, bad)
		want := time.Duration(min(k, 10)) * base
		if got := st.EjectedUntil.Sub(clock.Now()); got != want {
			t.Fatalf("ejection #%d lasts %v, want %v", k, got, want)
		}
		clock.Add(want)
	}
	// Four base periods in service take four off the multiplier: 10 → 6,
	// and the next ejection is the 7th step.
	pickAddr(t, c, bad).Done(upstream.Success)
	clock.Add(4 * base)
	fail(t, c, bad, 3)
	if got, want := status(t, c, bad).EjectedUntil.Sub(clock.Now()), 7*base; got != want {
		t.Errorf("ejection after 4 quiet periods lasts %v, want %v", got, want)
	}
}

func TestOutlierSuccessResetsCount(t *testing.T) {
	t.Parallel()
	c, _, addrs := outlierCluster(t, 3, nil)
	bad := addrs[1]
	for range 5 {
		fail(t, c, bad, 2)
		pickAddr(t, c, bad).Done(upstream.Success)
	}
	// Canceled says nothing about the endpoint: it neither counts nor resets.
	fail(t, c, bad, 2)
	pickAddr(t, c, bad).Done(upstream.Canceled)
	if st := status(t, c, bad); !st.EjectedUntil.IsZero() {
		t.Fatalf("ejected although no 3 failures were consecutive (until %v)", st.EjectedUntil)
	}
	fail(t, c, bad, 1)
	if st := status(t, c, bad); st.EjectedUntil.IsZero() {
		t.Fatalf("not ejected after 2 failures, a cancellation and a failure")
	}
}

func TestOutlierMaxEjectionPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		endpoints int
		percent   uint32
		want      int // endpoints ejected when all fail
	}{
		{"default 50% of 4", 4, 0, 2},
		{"50% of 3 rounds down", 3, 50, 1},
		{"10% of 3 still sheds one", 3, 10, 1},
		{"100% of 3", 3, 100, 3},
		{"single endpoint by default", 1, 0, 0},
		{"single endpoint at 100%", 1, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, clock, addrs := outlierCluster(t, tt.endpoints, &configv1.OutlierDetection{MaxEjectionPercent: tt.percent})
			for _, a := range addrs {
				if !status(t, c, a).EjectedUntil.IsZero() {
					continue
				}
				fail(t, c, a, 3)
			}
			ejected := 0
			for _, st := range c.Endpoints() {
				if !st.EjectedUntil.IsZero() {
					ejected++
				}
			}
			if ejected != tt.want {
				t.Fatalf("%d of %d endpoints ejected, want %d", ejected, tt.endpoints, tt.want)
			}
			if ejected == tt.endpoints {
				if e, err := c.Pick(); !errors.Is(err, upstream.ErrNoEndpoint) {
					t.Fatalf("Pick() with all ejected = %v, %v, want ErrNoEndpoint", e, err)
				}
				clock.Add(base)
				e, err := c.Pick()
				if err != nil {
					t.Fatalf("Pick() after the ejections expired: %v", err)
				}
				e.Done(upstream.Success)
			}
		})
	}
}

func TestOutlierSlotFreedEjectsNext(t *testing.T) {
	t.Parallel()
	c, clock, addrs := outlierCluster(t, 2, nil) // one may be ejected
	fail(t, c, addrs[0], 3)
	fail(t, c, addrs[1], 3) // refused: the cap is reached
	if !status(t, c, addrs[1]).EjectedUntil.IsZero() {
		t.Fatal("second endpoint of two ejected at 50%")
	}
	clock.Add(base)
	fail(t, c, addrs[1], 3) // the slot is free again
	if status(t, c, addrs[1]).EjectedUntil.IsZero() {
		t.Fatal("endpoint not ejected once the first ejection expired")
	}
}

func TestOutlierDisabled(t *testing.T) {
	t.Parallel()
	c, _, addrs := outlierCluster(t, 2, &configv1.OutlierDetection{Disabled: true})
	fail(t, c, addrs[0], 30)
	if st := status(t, c, addrs[0]); !st.EjectedUntil.IsZero() {
		t.Fatalf("ejected with outlier detection disabled (until %v)", st.EjectedUntil)
	}
}
