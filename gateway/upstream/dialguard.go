package upstream

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
)

// dialGuardLogEvery bounds how often one endpoint's refused connections
// are logged; each refusal is counted.
const dialGuardLogEvery = 10 * time.Second

// dialGuard keeps an endpoint's connections inside its networks: the
// control plane sets them from the owning team's upstreams when the team
// may use the endpoint's name only by network, so that a name that
// resolves into another team's addresses (a team's own DNS record, a
// rebinding) cannot reach them.
type dialGuard struct {
	endpoint *Endpoint
	networks []netip.Prefix
	refused  atomic.Uint64
	// lastLog is the unix nanos of the last logged refusal.
	lastLog atomic.Int64
}

// DialRefusedError is a connection the node refused to open: the address
// an endpoint's name resolved to lies outside the endpoint's networks.
type DialRefusedError struct {
	Endpoint string
	Address  netip.Addr
}

// Error leaves the address out: the message may reach the team (a probe
// refusing its change), and naming where any name resolves would make the
// nodes' resolver the team's. The node's log names it.
func (e *DialRefusedError) Error() string {
	return fmt.Sprintf("endpoint %s resolved outside the networks its team may use", e.Endpoint)
}

func parseNetworks(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, len(list))
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// An IPv4-mapped network is its IPv4 network: the addresses
			// checked against it are unmapped.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out[i] = p.Masked()
	}
	return out, nil
}

// allows reports whether ip lies in one of the networks.
func (g *dialGuard) allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range g.networks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// control is net.Dialer.Control: it runs after the name is resolved and
// before each address is connected to, so a refused address never sees
// a packet.
func (g *dialGuard) control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("endpoint %s: connecting to %q: %w", g.endpoint.addr, address, err)
	}
	return g.check(ip)
}

// after wraps a custom dialer, which resolves on its own: the address it
// connected to is checked before the connection is used.
func (g *dialGuard) after(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		var ip netip.Addr
		if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			ip = ta.AddrPort().Addr()
		} else if ap, perr := netip.ParseAddrPort(conn.RemoteAddr().String()); perr == nil {
			ip = ap.Addr()
		}
		if err := g.check(ip); err != nil {
			_ = conn.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: conn.RemoteAddr(), Err: err}
		}
		return conn, nil
	}
}

// check counts and logs (at most every dialGuardLogEvery) a refusal.
func (g *dialGuard) check(ip netip.Addr) error {
	if ip.IsValid() && g.allows(ip) {
		return nil
	}
	n := g.refused.Add(1)
	err := &DialRefusedError{Endpoint: g.endpoint.addr, Address: ip}
	now := time.Now().UnixNano()
	if last := g.lastLog.Load(); now-last >= int64(dialGuardLogEvery) && g.lastLog.CompareAndSwap(last, now) {
		c := g.endpoint.cluster
		c.log.Warn("connection refused: the endpoint resolved outside its team's networks",
			"team", c.cfg.GetTeam(), "endpoint", g.endpoint.addr, "address", ip.String(), "refused_total", n)
	}
	return err
}
