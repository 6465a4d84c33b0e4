package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// SlowResult is how the gateway dealt with clients that send their request
// head a byte at a time while normal traffic runs.
type SlowResult struct {
	Clients           int     `json:"clients"`
	ReadHeaderTimeout float64 `json:"read_header_timeout_seconds"`
	// CutOff clients were disconnected (or answered) by the gateway;
	// WithinSlack of them no later than ReadHeaderTimeout + Slack after
	// they connected. NotCut were still connected when the harness gave up
	// on them; DialFailed never connected.
	CutOff      int     `json:"cut_off"`
	Slack       float64 `json:"slack_seconds"`
	WithinSlack int     `json:"within_slack"`
	NotCut      int     `json:"not_cut"`
	DialFailed  int     `json:"dial_failed"`
	// How counts the ways the connections ended: "closed" (FIN),
	// "reset" (RST) or "answered HTTP/1.1 408 …".
	How map[string]int `json:"how"`
	// CutMin, CutMedian and CutMax are seconds from starting to connect to
	// the cut.
	CutMin    float64 `json:"cut_min_seconds"`
	CutMedian float64 `json:"cut_median_seconds"`
	CutMax    float64 `json:"cut_max_seconds"`
	// Traffic is the normal load that ran at the same time.
	Traffic Phase `json:"traffic"`
}

// slowEnd is how one slow client ended.
type slowEnd struct {
	after time.Duration
	how   string
	cut   bool
	dial  bool // the dial failed
}

// slowClient connects to addr, sends the start of a request head and then
// one more header byte every 100 ms until the server cuts it off or
// giveUp passes.
func slowClient(ctx context.Context, addr string, giveUp time.Duration) slowEnd {
	// The clock starts before the dial: the server's starts at accept,
	// which may come before this goroutine runs again on a busy CPU, so
	// the times measured are upper bounds.
	t0 := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return slowEnd{dial: true, how: err.Error()}
	}
	defer func() {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
	}()
	stop := t0.Add(giveUp)
	head := "GET " + benchPath + " HTTP/1.1\r\nHost: " + addr + "\r\nX-Trickle: "
	if _, err := io.WriteString(conn, head); err != nil {
		return slowEnd{after: time.Since(t0), how: "reset", cut: true}
	}
	buf := make([]byte, 512)
	trickle := []byte{'a'}
	for ctx.Err() == nil && time.Now().Before(stop) {
		if err := conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			return slowEnd{after: time.Since(t0), how: err.Error()}
		}
		n, err := conn.Read(buf)
		if n > 0 {
			return slowEnd{after: time.Since(t0), how: "answered " + firstLine(buf[:n]), cut: true}
		}
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			if _, err := conn.Write(trickle); err != nil {
				return slowEnd{after: time.Since(t0), how: "reset", cut: true}
			}
		case errors.Is(err, io.EOF):
			return slowEnd{after: time.Since(t0), how: "closed", cut: true}
		case errors.Is(err, syscall.ECONNRESET):
			return slowEnd{after: time.Since(t0), how: "reset", cut: true}
		default:
			return slowEnd{after: time.Since(t0), how: err.Error(), cut: true}
		}
	}
	return slowEnd{after: time.Since(t0), how: "still open"}
}

func firstLine(b []byte) string {
	if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// runSlowClients runs n slow clients at once against addr and summarises
// how they ended.
func runSlowClients(ctx context.Context, addr string, n int, rht, slack time.Duration) *SlowResult {
	res := &SlowResult{
		Clients:           n,
		ReadHeaderTimeout: rht.Seconds(),
		Slack:             slack.Seconds(),
		How:               map[string]int{},
	}
	ends := make([]slowEnd, n)
	giveUp := 3*rht + 2*time.Second
	var wg sync.WaitGroup
	for i := range ends {
		wg.Go(func() { ends[i] = slowClient(ctx, addr, giveUp) })
	}
	wg.Wait()
	var cuts []time.Duration
	for _, e := range ends {
		switch {
		case e.dial:
			res.DialFailed++
		case e.cut:
			res.CutOff++
			cuts = append(cuts, e.after)
			if e.after <= rht+slack {
				res.WithinSlack++
			}
		default:
			res.NotCut++
		}
		res.How[e.how]++
	}
	if len(cuts) > 0 {
		slices.Sort(cuts)
		res.CutMin = cuts[0].Seconds()
		res.CutMedian = cuts[len(cuts)/2].Seconds()
		res.CutMax = cuts[len(cuts)-1].Seconds()
	}
	return res
}

// slowHeaders runs normal traffic at SlowRate against the gateway and, half
// a second in, SlowClients clients that never finish their request head.
func (h *harness) slowHeaders(ctx context.Context, gw *target) error {
	o := h.opts
	rht := o.ReadHeaderTimeout
	h.logf("slow headers: %d slow clients against %d req/s of normal traffic", o.SlowClients, o.SlowRate)
	spec := phaseSpec{addr: gw.addr, conns: min(o.Conns, 32), duration: 2*rht + 2*time.Second, rate: float64(o.SlowRate), grace: 5 * time.Second}
	g, err := newGenerator(ctx, spec)
	if err != nil {
		return err
	}
	defer g.close()
	before, err := h.sample(gw)
	if err != nil {
		return err
	}
	var slow *SlowResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		if sleep(ctx, 500*time.Millisecond) != nil {
			return
		}
		slow = runSlowClients(ctx, gw.addr, o.SlowClients, rht, 500*time.Millisecond)
	}()
	r := g.run(ctx)
	<-done
	after, err := h.sample(gw)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !gw.proc.alive() {
		return gw.proc.failure()
	}
	slow.Traffic = phaseOf(gw.name, spec, r, before, after)
	slow.Traffic.Mode = fmt.Sprintf("%d/s", o.SlowRate)
	h.report.Slow = slow
	return nil
}
