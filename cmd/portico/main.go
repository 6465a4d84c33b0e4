// Command portico runs Portico roles: `portico gateway` runs a gateway node
// (fed from a config file or by the control plane); `portico control` the
// control plane; `portico keys` the key service; `portico dev` everything in one process on embedded
// defaults, with demo backends, and prints how to call it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-gw/portico/internal/buildinfo"
)

const usage = `usage: portico <role> [flags]

roles:
  dev       every role in one process on embedded defaults, with demo backends
  gateway   a gateway node serving a snapshot from -config FILE or from -control URL
  control   the control plane: the admin API, the nodes' snapshot streams and the fast lane
  keys      the key service: issues, rotates and revokes API keys and token deny entries
  quota     the quota service: consumes the usage topic into totals, reconciles, bills

Run "portico <role> -h" for the role's flags, "portico --version" for
the build.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch role, args := os.Args[1], os.Args[2:]; role {
	case "dev":
		err = runDev(ctx, args)
	case "gateway":
		err = runGateway(ctx, args)
	case "control":
		err = runControl(ctx, args)
	case "keys":
		err = runKeys(ctx, args)
	case "quota":
		err = runQuota(ctx, args)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	case "-version", "--version", "version":
		fmt.Println("portico", buildinfo.Read())
		return
	default:
		fmt.Fprintf(os.Stderr, "portico: unknown role %q\n\n%s", role, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "portico:", err)
		os.Exit(1)
	}
}
