package distribution_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/gateway/distribution"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
)

// records is a slog handler that keeps every record it is given.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Clone())
	return nil
}

// snapshot returns the records so far, each as its message and its
// attributes by key.
func (r *records) snapshot() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logged
	for _, rec := range r.list {
		l := logged{msg: rec.Message, attrs: map[string]slog.Value{}}
		rec.Attrs(func(a slog.Attr) bool {
			l.attrs[a.Key] = a.Value
			return true
		})
		out = append(out, l)
	}
	return out
}

type logged struct {
	msg   string
	attrs map[string]slog.Value
}

func (l logged) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q", l.msg)
	for _, k := range slices.Sorted(maps.Keys(l.attrs)) {
		fmt.Fprintf(&b, " %s=%q", k, l.attrs[k].String())
	}
	return b.String()
}

// lane is a Lane that takes every update.
type lane struct{}

func (lane) Apply([]*configv1.FastLaneEntry) error { return nil }

// runClient runs a client of url, with a Lane if withLane and backoffs
// of 10 to 50 ms, that logs to the returned records, until the test ends.
func runClient(t *testing.T, url string, hc connect.HTTPClient, withLane bool) *records {
	t.Helper()
	logs := &records{}
	opts := distribution.Options{
		URL: url, HTTPClient: hc, NodeID: "n1", Pool: "public",
		Apply:      func(*configv1.Snapshot) error { return nil },
		Logger:     slog.New(logs),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}
	if withLane {
		opts.Lane = lane{}
	}
	client := distribution.New(opts)
	runUntilCleanup(t, client)
	return logs
}

// waitFor waits up to 5 s for three records with the message msg of
// each of streams, and returns all records logged by then.
func waitFor(t *testing.T, logs *records, msg string, streams ...string) []logged {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := logs.snapshot()
		n := map[string]int{}
		for _, l := range got {
			if l.msg == msg {
				n[l.attrs["stream"].String()]++
			}
		}
		if !slices.ContainsFunc(streams, func(s string) bool { return n[s] < 3 }) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 5s, records %q by stream: %v, want 3 of each of %q; all: %v", msg, n, streams, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnreachableLogged: a node whose control plane refuses connections
// logs "control plane unreachable" with the address, the dial's error and
// the time to the next try, for both streams, and not connect-go's
// "write envelope: EOF" that a refused h2c dial surfaces as.
func TestUnreachableLogged(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	logs := runClient(t, "http://"+addr, nil, true)
	for _, l := range waitFor(t, logs, "control plane unreachable; retrying", "snapshot", "fast lane") {
		if l.msg != "control plane unreachable; retrying" {
			t.Errorf("logged %v, want only control plane unreachable", l)
			continue
		}
		if got := l.attrs["addr"].String(); got != addr {
			t.Errorf("unreachable addr=%q, want %q", got, addr)
		}
		if e := l.attrs["err"].String(); !strings.Contains(e, "connection refused") || strings.Contains(e, "write envelope") {
			t.Errorf("unreachable err=%q, want the refused dial", e)
		}
		if in := l.attrs["in"]; in.Kind() != slog.KindDuration || in.Duration() <= 0 || in.Duration() > 50*time.Millisecond {
			t.Errorf("unreachable in=%v, want the wait before the next try (0, 50ms]", in)
		}
	}
}

// endsAfterOne is a control plane that sends each stream one empty
// message and then ends it with an error.
type endsAfterOne struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
}

func (endsAfterOne) Stream(_ context.Context, s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	if err := s.Send(&distributionv1.StreamResponse{}); err != nil {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("going away"))
}

func (endsAfterOne) FastLane(_ context.Context, s *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse]) error {
	if err := s.Send(&distributionv1.FastLaneResponse{}); err != nil {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("going away"))
}

// refuses is a control plane that refuses every stream as unavailable
// before it sends anything, as one whose store is down does.
type refuses struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
}

func (refuses) Stream(context.Context, *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the store is down"))
}

func (refuses) FastLane(context.Context, *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse]) error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the store is down"))
}

// idle is a control plane that takes the snapshot stream and sends
// nothing on it; 150 ms after each stream opens it calls lose, which
// drops the connection.
type idle struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
	lose func()
}

func (h *idle) Stream(ctx context.Context, s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	if _, err := s.Receive(); err != nil {
		return err
	}
	t := time.AfterFunc(150*time.Millisecond, h.lose)
	defer t.Stop()
	<-ctx.Done()
	return nil
}

// TestStreamEndedLogged: a stream the control plane answered and then
// ended, even as unavailable, a stream it refused as unavailable, and a
// stream that was open without a message for longer than MaxBackoff when
// its connection was lost are logged as ended, not as an unreachable
// control plane.
func TestStreamEndedLogged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		h       distributionv1connect.DistributionServiceHandler
		streams []string
	}{
		{"ends after one", endsAfterOne{}, []string{"snapshot", "fast lane"}},
		{"refuses", refuses{}, []string{"snapshot", "fast lane"}},
		// One stream: losing the connection ends every stream on it.
		{"lost while idle", &idle{}, []string{"snapshot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.Handle(distributionv1connect.NewDistributionServiceHandler(tc.h))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			if h, ok := tc.h.(*idle); ok {
				h.lose = srv.CloseClientConnections
			}
			srv.Start()
			t.Cleanup(srv.Close)
			protocols := new(http.Protocols)
			protocols.SetUnencryptedHTTP2(true)
			tr := &http.Transport{Protocols: protocols}
			t.Cleanup(tr.CloseIdleConnections)

			logs := runClient(t, srv.URL, &http.Client{Transport: tr}, len(tc.streams) == 2)
			for _, l := range waitFor(t, logs, "control plane stream ended; reconnecting", tc.streams...) {
				if l.msg != "control plane stream ended; reconnecting" {
					t.Errorf("logged %v, want only stream ended", l)
				}
			}
		})
	}
}
