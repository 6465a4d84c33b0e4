package redistest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that forwards every connection to one
// target and can delay what it forwards, to make a server answer slowly.
type Proxy struct {
	target string
	ln     net.Listener
	delay  atomic.Int64 // time.Duration
	closed chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// DelayProxy starts a proxy to target on 127.0.0.1 with no delay. It is
// stopped, with every connection through it closed, when the test ends.
func DelayProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes the proxy hold every chunk it reads, in either direction,
// for d before forwarding it. It applies to chunks read from then on, on
// open connections too. Zero turns the delay off.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *Proxy) close() {
	close(p.closed)
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c to be closed by close; it reports false, having closed
// c, when the proxy is already closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	// When either direction ends, closing both connections ends the other.
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipe(server, client)
		server.Close()
		client.Close()
	}()
	p.pipe(client, server)
	server.Close()
	client.Close()
}

// pipe copies src to dst chunk by chunk, holding each chunk for the
// current delay.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 && !p.sleep(d) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// sleep waits for d and reports false if the proxy closed meanwhile.
func (p *Proxy) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-p.closed:
		return false
	}
}
