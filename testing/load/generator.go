package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// requestFor is the request the load generator sends to addr: a small GET
// to the bench route, built once and written as is. header is extra header
// lines, each ending in CRLF (an API key for the gateway-auth target).
func requestFor(addr, header string) []byte {
	return fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: portico-load\r\nAccept: */*\r\n%s\r\n", benchPath, addr, header)
}

// client is one keep-alive HTTP/1.1 connection of the load generator. It is
// used by one goroutine at a time.
type client struct {
	addr     string
	req      []byte
	deadline time.Time // for every connection it makes; zero for none
	conn     net.Conn
	br       *bufio.Reader
}

func (c *client) connect() error {
	c.drop()
	conn, err := net.DialTimeout("tcp", c.addr, 2*time.Second)
	if err != nil {
		return err
	}
	if !c.deadline.IsZero() {
		if err := conn.SetDeadline(c.deadline); err != nil {
			conn.Close()
			return err
		}
	}
	c.conn = conn
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	return nil
}

// roundTrip sends the request and reads the response, connecting first if
// needed. After an error the connection is gone; the next call redials.
func (c *client) roundTrip() (status int, err error) {
	if c.conn == nil {
		if err := c.connect(); err != nil {
			return 0, err
		}
	}
	if _, err := c.conn.Write(c.req); err != nil {
		c.drop()
		return 0, err
	}
	status, keepAlive, err := readResponse(c.br)
	if err != nil {
		c.drop()
		return 0, err
	}
	if !keepAlive {
		c.drop()
	}
	return status, nil
}

func (c *client) setDeadline(t time.Time) error {
	c.deadline = t
	if c.conn == nil {
		return nil
	}
	return c.conn.SetDeadline(t)
}

func (c *client) drop() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// phaseSpec is one run of the load generator against one address.
type phaseSpec struct {
	addr     string
	header   string // extra request header lines, CRLF-terminated
	conns    int
	duration time.Duration
	// rate is the open loop's requests per second; 0 runs a closed loop
	// that sends the next request as soon as the last one is answered.
	rate float64
	// grace is how long requests in flight at the end may still take;
	// what is unanswered then counts as an error.
	grace time.Duration
}

// loadResult is what a phase measured.
type loadResult struct {
	// latency of every answered request. In the open loop it counts from
	// the request's place on the timeline when the connection was still
	// busy then (queueing is the system's), and from the moment it was
	// sent otherwise (the client's timer granularity is not).
	latency Histogram
	// lag is, in the open loop, how late the client's timer sent requests
	// whose connection was free: the harness's own resolution.
	lag Histogram
	// ok counts 2xx answers, bad other statuses, failed transport errors
	// and requests never sent because the phase ran out of time.
	ok, bad, failed uint64
	statuses        map[int]uint64
	firstErr        string
	elapsed         time.Duration
}

func (r *loadResult) answered() uint64 { return r.ok + r.bad }

func (r *loadResult) errors() uint64 { return r.bad + r.failed }

func (r *loadResult) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// tally is one worker's share of a loadResult.
type tally struct {
	loadResult
	last time.Time
}

func (t *tally) count(status int) {
	if status/100 == 2 {
		t.ok++
		return
	}
	t.bad++
	if t.statuses == nil {
		t.statuses = map[int]uint64{}
	}
	t.statuses[status]++
	if t.firstErr == "" {
		t.firstErr = fmt.Sprintf("status %d", status)
	}
}

func (t *tally) fail(err error) {
	t.failed++
	if t.firstErr == "" {
		t.firstErr = err.Error()
	}
}

// generator drives one phase: its connections are made and warmed by
// newGenerator, used by run, and closed by close.
type generator struct {
	spec    phaseSpec
	clients []*client
	stop    atomic.Bool
}

// newGenerator opens spec.conns connections to spec.addr and sends one
// request on each, so the phase starts with every connection (and the
// proxy's upstream connections) established.
func newGenerator(ctx context.Context, spec phaseSpec) (*generator, error) {
	g := &generator{spec: spec, clients: make([]*client, spec.conns)}
	req := requestFor(spec.addr, spec.header)
	errs := make([]error, spec.conns)
	var wg sync.WaitGroup
	for i := range g.clients {
		c := &client{addr: spec.addr, req: req}
		g.clients[i] = c
		wg.Go(func() {
			if err := c.setDeadline(time.Now().Add(10 * time.Second)); err != nil {
				errs[i] = err
				return
			}
			status, err := c.roundTrip()
			if err == nil && status != 200 {
				err = fmt.Errorf("warm-up request answered %d", status)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		g.close()
		return nil, fmt.Errorf("connecting to %s: %w", spec.addr, err)
	}
	if err := ctx.Err(); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

func (g *generator) close() {
	for _, c := range g.clients {
		c.drop()
	}
}

// run runs the phase and returns when every worker is done: at most
// duration + grace (+ one dial timeout) after it starts, or soon after ctx
// is done.
func (g *generator) run(ctx context.Context) *loadResult {
	stopWatch := context.AfterFunc(ctx, func() { g.stop.Store(true) })
	defer stopWatch()

	n := len(g.clients)
	t0 := time.Now()
	end := t0.Add(g.spec.duration)
	hardEnd := end.Add(g.spec.grace)
	// The open loop's timeline: request i is due at t0 + i·interval.
	total := int(g.spec.rate * g.spec.duration.Seconds())
	var interval float64
	if g.spec.rate > 0 {
		interval = float64(time.Second) / g.spec.rate
	}
	tallies := make([]*tally, n)
	var wg sync.WaitGroup
	for i, c := range g.clients {
		t := &tally{last: t0}
		tallies[i] = t
		if err := c.setDeadline(hardEnd); err != nil {
			t.fail(err)
			c.drop()
		}
		if g.spec.rate > 0 {
			wg.Go(func() { g.openLoop(c, t, i, total, t0, interval, hardEnd) })
		} else {
			wg.Go(func() { g.closedLoop(c, t, end) })
		}
	}
	wg.Wait()

	r := &loadResult{}
	last := t0
	for _, t := range tallies {
		r.latency.Merge(&t.latency)
		r.lag.Merge(&t.lag)
		r.ok += t.ok
		r.bad += t.bad
		r.failed += t.failed
		for s, k := range t.statuses {
			if r.statuses == nil {
				r.statuses = map[int]uint64{}
			}
			r.statuses[s] += k
		}
		if r.firstErr == "" {
			r.firstErr = t.firstErr
		}
		if t.last.After(last) {
			last = t.last
		}
	}
	r.elapsed = last.Sub(t0)
	return r
}

// closedLoop sends requests back to back until end.
func (g *generator) closedLoop(c *client, t *tally, end time.Time) {
	for !g.stop.Load() {
		start := time.Now()
		if !start.Before(end) {
			return
		}
		status, err := c.roundTrip()
		done := time.Now()
		t.last = done
		if err != nil {
			t.fail(err)
			// Do not spin on a target that refuses connections.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		t.latency.Record(done.Sub(start))
		t.count(status)
	}
}

// openLoop sends this worker's share of the timeline: requests k, k+n,
// k+2n… of total, request i due at t0 + i·interval. A request whose time
// comes while the previous one on the connection is unanswered is sent as
// soon as the connection is free, and its latency includes the wait, so a
// slow answer is not hidden by the requests it delayed.
func (g *generator) openLoop(c *client, t *tally, k, total int, t0 time.Time, interval float64, hardEnd time.Time) {
	n := len(g.clients)
	busyUntil := t0
	for i := k; i < total; i += n {
		now := time.Now()
		if g.stop.Load() || now.After(hardEnd) {
			// What is left was never sent: the target fell too far behind.
			t.failed += uint64((total-1-i)/n + 1)
			if t.firstErr == "" {
				t.firstErr = "requests left unsent at the end of the phase"
			}
			return
		}
		due := t0.Add(time.Duration(float64(i) * interval))
		if d := due.Sub(now); d > 0 {
			time.Sleep(d)
			now = time.Now()
		}
		from := due
		if !busyUntil.After(due) {
			from = now
			t.lag.Record(now.Sub(due))
		}
		status, err := c.roundTrip()
		done := time.Now()
		busyUntil = done
		t.last = done
		if err != nil {
			t.fail(err)
			continue
		}
		t.latency.Record(done.Sub(from))
		t.count(status)
	}
}
