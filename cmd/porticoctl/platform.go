package main

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// parseUpstream parses a team's --upstream: a host ("orders.internal"), a
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

// platformCmd reads or replaces the platform's objects: porticoctl
// platform get, porticoctl platform put -f FILE.
func (c *cli) platformCmd() *cobra.Command {
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the platform's objects, as JSON or YAML for platform put",
		Long: `Get prints the platform's objects (products, plans, scopes, issuers, rate
limiting, upstream identities) as JSON, or with -o yaml as YAML, that platform
put -f takes back.`,
		Example: `  porticoctl platform get -o yaml > platform.yaml`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.admin.GetPlatform(cmd.Context(), connect.NewRequest(&adminv1.GetPlatformRequest{}))
			if err != nil {
				return failed(err)
			}
			return c.printMessage(resp.Msg.GetPlatform())
		},
	}
	var file, msg string
	put := &cobra.Command{
		Use:   "put -f FILE [flags]",
		Short: "Replace the platform's objects with FILE's (platform admins)",
		Long: `Put replaces the platform's objects (products, plans, scopes, issuers, rate
limiting, upstream identities) with those of FILE, YAML or JSON (by its .json
name), as platform get prints them. Only platform admins may.`,
		Example: `  porticoctl platform put -f platform.yaml -m "plan gold: 200 calls a second"`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("-f FILE is required")
			}
			p := &adminv1.Platform{}
			if err := readConfigFile(file, p); err != nil {
				return &failure{err: err} // as route put and apply: exit 1
			}
			resp, err := c.admin.PutPlatform(cmd.Context(), connect.NewRequest(&adminv1.PutPlatformRequest{Platform: p, Message: msg}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			c.printChange(resp.Msg.GetChange(), "the platform")
			return nil
		},
	}
	put.Flags().StringVarP(&file, "file", "f", "", "the `FILE` of the platform's objects, YAML or JSON")
	must(put.MarkFlagFilename("file", "yaml", "yml", "json"))
	messageFlag(put, &msg)
	return group(&cobra.Command{
		Use:   "platform",
		Short: "Read or replace the platform's objects",
	}, c.remote(get), c.remote(put))
}
