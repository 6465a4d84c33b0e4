package compile

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// A team's clusters reach only the backends the platform gave it: every
// endpoint must lie in the team's upstreams (host names, domains, IP
// networks, ports), and a cluster presents only a client certificate the
// platform lets the team use. Without this a team could put a public
// route of its own in front of another team's backend, or make the node
// present the gateway's own mTLS identity to it.

// upstreamRule is one compiled Upstream of a team.
type upstreamRule struct {
	team  string
	path  string // "teams[orders].upstreams[0]"
	given string // an IPv4-mapped cidr as written, which cidr unmaps
	host  string // lowercase exact name, or "" for a domain or a network
	under string // lowercase domain of a "*." host, without the "*."
	cidr  netip.Prefix
	ports [][2]uint16 // inclusive ranges; none: any port
}

func (r *upstreamRule) what() string {
	switch {
	case r.host != "":
		return fmt.Sprintf("host %q", r.host)
	case r.under != "":
		return fmt.Sprintf("host %q", "*."+r.under)
	}
	if r.given != "" {
		return fmt.Sprintf("network %s (%q)", r.cidr, r.given)
	}
	return "network " + r.cidr.String()
}

func (r *upstreamRule) allowsPort(port uint16) bool {
	if len(r.ports) == 0 {
		return true
	}
	for _, pr := range r.ports {
		if pr[0] <= port && port <= pr[1] {
			return true
		}
	}
	return false
}

// portsMeet reports whether two rules share a port.
func portsMeet(a, b *upstreamRule) bool {
	if len(a.ports) == 0 || len(b.ports) == 0 {
		return true
	}
	for _, x := range a.ports {
		for _, y := range b.ports {
			if x[0] <= y[1] && y[0] <= x[1] {
				return true
			}
		}
	}
	return false
}

// under reports whether name lies under domain ("a.b.c" under "b.c").
func under(name, domain string) bool {
	return strings.HasSuffix(name, "."+domain)
}

// overlaps reports whether two rules can match the same endpoint. A name
// and a network cannot be compared before the name is resolved: they do
// not overlap here, and nodes keep names used by network inside the
// team's networks.
func (r *upstreamRule) overlaps(o *upstreamRule) bool {
	if !portsMeet(r, o) {
		return false
	}
	switch {
	case r.cidr.IsValid() || o.cidr.IsValid():
		return r.cidr.IsValid() && o.cidr.IsValid() && r.cidr.Overlaps(o.cidr)
	case r.host != "" && o.host != "":
		return r.host == o.host
	case r.host != "":
		return under(r.host, o.under)
	case o.host != "":
		return under(o.host, r.under)
	}
	return r.under == o.under || under(r.under, o.under) || under(o.under, r.under)
}

// compileUpstreams checks every team's upstreams, and that no two teams'
// overlap (an endpoint there would have two owners), and returns each
// team's rules.
func compileUpstreams(cfg *adminv1.Config, errs *Error) map[string][]*upstreamRule {
	byTeam := map[string][]*upstreamRule{}
	var all []*upstreamRule
	seen := map[string]bool{}
	for _, t := range cfg.GetTeams() {
		if seen[t.GetName()] {
			continue // reported by checkTeams
		}
		seen[t.GetName()] = true
		for j, u := range t.GetUpstreams() {
			r := &upstreamRule{team: t.GetName(), path: "teams[" + t.GetName() + "].upstreams[" + strconv.Itoa(j) + "]"}
			switch {
			case u.GetCidr() != "":
				p, err := netip.ParsePrefix(u.GetCidr())
				if err != nil {
					continue // the schema says why
				}
				if p.Addr().Is4In6() {
					r.given = u.GetCidr()
				}
				if p, err = unmapPrefix(p); err != nil {
					errs.add(r.path+".cidr", "%v", err)
					continue
				}
				r.cidr = p.Masked()
			case strings.HasPrefix(u.GetHost(), "*."):
				r.under = strings.ToLower(strings.TrimPrefix(u.GetHost(), "*."))
			default:
				if _, err := netip.ParseAddr(u.GetHost()); err == nil {
					errs.add(r.path+".host", "%q is an IP address: give it as a network (cidr %q)", u.GetHost(), u.GetHost()+"/32")
					continue
				}
				r.host = strings.ToLower(u.GetHost())
			}
			ok := true
			for k, ps := range u.GetPorts() {
				pr, err := parsePorts(ps)
				if err != nil {
					errs.add(r.path+".ports["+strconv.Itoa(k)+"]", "%v", err)
					ok = false
					continue
				}
				r.ports = append(r.ports, pr)
			}
			if !ok {
				continue
			}
			for _, o := range all {
				if o.team != r.team && r.overlaps(o) {
					errs.add(r.path, "%s overlaps team %q's %s: an endpoint there would have two owners", r.what(), o.team, o.what())
				}
			}
			all = append(all, r)
			byTeam[r.team] = append(byTeam[r.team], r)
		}
	}
	return byTeam
}

// unmapPrefix returns an IPv4-mapped IPv6 network ("::ffff:10.1.2.0/120")
// as the IPv4 network it stands for ("10.1.2.0/24"), and any other as it
// is. Endpoints and the addresses names resolve to are unmapped before
// they are matched, here and on the nodes, so a mapped network would
// match none of them, and would not overlap another team's IPv4 network
// of the same addresses. A mapped network shorter than /96 is refused: it
// also holds IPv6 addresses outside the mapped range, and no IPv4 network
// says the same.
func unmapPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.Addr().Is4In6() {
		return p, nil
	}
	if p.Bits() < 96 {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped network shorter than /96, which reaches past the mapped addresses: give an IPv4 network instead", p)
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96), nil
}

// parsePorts parses "443" or "8000-8099".
func parsePorts(s string) ([2]uint16, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || a == 0 || b == 0 {
		return [2]uint16{}, fmt.Errorf("%q is not a port (1-65535) or a range of them", s)
	}
	if a > b {
		return [2]uint16{}, fmt.Errorf("the range %q ends before it starts", s)
	}
	return [2]uint16{uint16(a), uint16(b)}, nil
}

// checkCluster checks one team cluster against the team's upstreams and
// the platform's identities, and returns the copy that goes into the
// snapshot: its team set, and its endpoints' networks where the team may
// use a name only by network.
func checkCluster(c *configv1.Cluster, team, path string, rules []*upstreamRule, identities map[string]*adminv1.UpstreamIdentity, errs *Error) *configv1.Cluster {
	out := proto.CloneOf(c)
	if c.GetTeam() != "" && c.GetTeam() != team {
		errs.add(path+".team", "the cluster says team %q in team %q's config", c.GetTeam(), team)
	}
	out.Team = team
	if len(rules) == 0 {
		errs.add(path, "team %q has no upstreams: a platform admin assigns the backend addresses a team may use (teams[%s].upstreams)", team, team)
	}
	for i, e := range c.GetEndpoints() {
		epath := path + ".endpoints[" + strconv.Itoa(i) + "]"
		if len(e.GetNetworks()) > 0 {
			errs.add(epath+".networks", "set by the control plane from the team's upstreams; a team config leaves it empty")
			continue
		}
		if len(rules) == 0 {
			continue
		}
		nets, err := endpointNetworks(e.GetAddress(), rules)
		if err != nil {
			errs.add(epath+".address", "%v", err)
			continue
		}
		out.Endpoints[i].Networks = nets
	}
	tls := c.GetTls()
	if tls.GetCaFile() != "" {
		errs.add(path+".tls.ca_file", "a team's cluster pins its CA inline (ca_pem): files on nodes are the platform's")
	}
	if name := tls.GetIdentity(); name != "" {
		id := identities[name]
		switch {
		case id == nil:
			errs.add(path+".tls.identity", "no upstream identity %q: the platform declares identities (platform.upstream_identities)", name)
		case !slices.Contains(id.GetTeams(), team):
			errs.add(path+".tls.identity", "upstream identity %q is not given to team %q", name, team)
		}
	}
	return out
}

// endpointNetworks decides whether the endpoint addr ("host:port") lies
// in rules, and returns the networks nodes must keep its connections in:
// none when a host rule covers its name or it is an address in a network,
// the team's networks that allow its port when it is a name the team may
// use only by network.
func endpointNetworks(addr string, rules []*upstreamRule) ([]string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("%q has no valid port", addr)
	}
	port := uint16(p)
	team := rules[0].team
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		for _, r := range rules {
			if r.cidr.IsValid() && r.cidr.Contains(ip) && r.allowsPort(port) {
				return nil, nil
			}
		}
		return nil, fmt.Errorf("%s is outside team %q's upstreams", addr, team)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	var nets []string
	for _, r := range rules {
		if !r.allowsPort(port) {
			continue
		}
		switch {
		case r.host != "" && r.host == name, r.under != "" && under(name, r.under):
			return nil, nil
		case r.cidr.IsValid():
			nets = append(nets, r.cidr.String())
		}
	}
	if len(nets) == 0 {
		return nil, fmt.Errorf("%s is outside team %q's upstreams", addr, team)
	}
	return nets, nil
}

// compileIdentities checks the platform's upstream identities and returns
// them by name.
func compileIdentities(cfg *adminv1.Config, errs *Error) map[string]*adminv1.UpstreamIdentity {
	teams := map[string]bool{}
	for _, t := range cfg.GetTeams() {
		teams[t.GetName()] = true
	}
	out := map[string]*adminv1.UpstreamIdentity{}
	for _, id := range cfg.GetPlatform().GetUpstreamIdentities() {
		path := "platform: upstream_identities[" + id.GetName() + "]"
		if out[id.GetName()] != nil {
			errs.add(path, "upstream identity %q is declared twice", id.GetName())
			continue
		}
		out[id.GetName()] = id
		for j, team := range id.GetTeams() {
			if !teams[team] {
				// A name given ahead of its team would hand the identity
				// to whoever creates that team later.
				errs.add(path+".teams["+strconv.Itoa(j)+"]", "no such team %q", team)
			}
		}
	}
	return out
}
