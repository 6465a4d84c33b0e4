package main

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// parseUpstream parses a team's -upstream: a host ("orders.internal"), a
// domain ("*.orders.internal") or a network ("10.20.0.0/16",
// "fd00::/64"), with optional ports after a colon ("…:443,8000-8099").
// The control plane checks the values; this only splits them.
func parseUpstream(v string) (*adminv1.Upstream, error) {
	addr, ports := v, ""
	if i := strings.IndexByte(v, '/'); i >= 0 {
		// A network: ports, if any, follow its prefix length.
		if j := strings.IndexByte(v[i:], ':'); j >= 0 {
			addr, ports = v[:i+j], v[i+j+1:]
		}
	} else if i := strings.LastIndexByte(v, ':'); i >= 0 {
		addr, ports = v[:i], v[i+1:]
	}
	if addr == "" || (ports == "" && strings.HasSuffix(v, ":")) {
		return nil, fmt.Errorf("%q: want HOST, *.DOMAIN or CIDR, with optional :PORTS", v)
	}
	u := &adminv1.Upstream{}
	if strings.Contains(addr, "/") {
		u.Address = &adminv1.Upstream_Cidr{Cidr: addr}
	} else {
		u.Address = &adminv1.Upstream_Host{Host: addr}
	}
	if ports != "" {
		u.Ports = strings.Split(ports, ",")
	}
	return u, nil
}

// platform reads or replaces the platform's objects: porticoctl platform
// get, porticoctl platform put -f FILE.
func (c *cli) platform(ctx context.Context, args []string) int {
	if len(args) == 0 || (args[0] != "get" && args[0] != "put") {
		fmt.Fprintln(c.stderr, "porticoctl platform: get, or put -f FILE [-m MESSAGE]")
		return exitUsage
	}
	if args[0] == "get" {
		resp, err := c.admin.GetPlatform(ctx, connect.NewRequest(&adminv1.GetPlatformRequest{}))
		if err != nil {
			return c.failed("platform get", err)
		}
		return c.printJSON(resp.Msg.GetPlatform())
	}
	fs := c.flags("platform put")
	file := fs.String("f", "", "the platform's objects, YAML or JSON (as platform get prints them)")
	msg := fs.String("m", "", "why")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *file == "" {
		fmt.Fprintln(c.stderr, "porticoctl platform put: -f FILE is required")
		return exitUsage
	}
	p := &adminv1.Platform{}
	if err := readConfigFile(*file, p); err != nil {
		fmt.Fprintf(c.stderr, "porticoctl platform put: %v\n", err)
		return exitUsage
	}
	resp, err := c.admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: p, Message: *msg}))
	if err != nil {
		return c.failed("platform put", err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	return c.printChange(resp.Msg.GetChange(), "the platform")
}
