package load

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// IdleResult is the memory a proxy spends on idle keep-alive connections.
type IdleResult struct {
	Target string `json:"target"`
	// Conns were open, each after one answered request, when RSSAfter was
	// read; Failed could not be opened or were not answered 200.
	Conns  int    `json:"conns"`
	Failed int    `json:"failed"`
	Error  string `json:"error,omitempty"`
	// RSSBefore and RSSAfter are the proxy's VmRSS before the connections
	// were opened and once it settled with all of them open.
	RSSBefore int64 `json:"rss_before_bytes"`
	RSSAfter  int64 `json:"rss_after_bytes"`
	// FDsBefore and FDsAfter count the proxy's open files: the difference
	// shows it holds every connection.
	FDsBefore    int     `json:"fds_before"`
	FDsAfter     int     `json:"fds_after"`
	BytesPerConn float64 `json:"bytes_per_conn"`
	OpenTime     float64 `json:"open_seconds"`
}

// measureIdle opens n keep-alive connections to addr, each answering one
// request and then staying idle, and reads the memory of the process pid
// before and after. Every connection is closed on return.
func measureIdle(ctx context.Context, name, addr string, pid, n int) (*IdleResult, error) {
	res := &IdleResult{Target: name}
	// Warm the proxy first: its first requests size pools and stacks
	// that are not the connections' cost.
	g, err := newGenerator(ctx, phaseSpec{addr: addr, conns: 8, duration: 300 * time.Millisecond, grace: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	g.run(ctx)
	g.close()

	if res.RSSBefore, err = settledRSS(ctx, pid); err != nil {
		return nil, err
	}
	if res.FDsBefore, err = countFDs(pid); err != nil {
		return nil, err
	}

	req := requestFor(addr, "")
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range min(n, 64) {
		wg.Go(func() {
			c := &client{addr: addr, req: req}
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c.conn = nil // kept in conns; the reader is reused
				c.deadline = time.Now().Add(5 * time.Second)
				status, err := c.roundTrip()
				if err == nil && status != 200 {
					err = fmt.Errorf("answered %d", status)
					c.drop()
				}
				if err != nil {
					mu.Lock()
					res.Failed++
					if res.Error == "" {
						res.Error = err.Error()
					}
					mu.Unlock()
					continue
				}
				if err := c.conn.SetDeadline(time.Time{}); err != nil {
					c.drop()
					continue
				}
				conns[i] = c.conn
			}
		})
	}
	wg.Wait()
	res.OpenTime = time.Since(start).Seconds()
	defer func() {
		for _, c := range conns {
			if c != nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // no TIME_WAIT left behind
				}
				_ = c.Close()
			}
		}
	}()
	for _, c := range conns {
		if c != nil {
			res.Conns++
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if res.RSSAfter, err = settledRSS(ctx, pid); err != nil {
		return nil, err
	}
	if res.FDsAfter, err = countFDs(pid); err != nil {
		return nil, err
	}
	if res.Conns > 0 {
		res.BytesPerConn = float64(res.RSSAfter-res.RSSBefore) / float64(res.Conns)
	}
	return res, nil
}

// settledRSS reads the RSS of pid until two reads 100 ms apart differ by
// less than 0.5 %, or for at most 3 seconds, and returns the last.
func settledRSS(ctx context.Context, pid int) (int64, error) {
	prev, err := readRSS(pid)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, err
		}
		cur, err := readRSS(pid)
		if err != nil {
			return 0, err
		}
		if diff := cur - prev; diff*200 < cur && -diff*200 < cur {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// idle measures idle connections on a fresh process of each proxy.
func (h *harness) idle(ctx context.Context) error {
	for _, start := range []func(context.Context) (*target, error){h.startGateway, h.startBaseline, h.startNginx} {
		t, err := start(ctx)
		if err != nil {
			return err
		}
		if t == nil {
			continue
		}
		t.proc.name += " (idle connections)"
		h.logf("idle connections: opening %d to a fresh %s", h.opts.IdleConns, t.name)
		res, err := measureIdle(ctx, t.name, t.addr, t.proc.pid(), h.opts.IdleConns)
		if !t.proc.alive() {
			return fmt.Errorf("idle connections: %w", t.proc.failure())
		}
		t.proc.stop()
		if err != nil {
			return fmt.Errorf("idle connections to %s: %w", t.name, err)
		}
		h.report.Idle = append(h.report.Idle, *res)
	}
	return nil
}
