// Command porticoctl is the admin CLI of Portico, a Connect client of the
// control plane's admin API, of the key service and of the quota
// service. A team applies its
// directory of route, cluster and service files:
//
//	porticoctl diff -f teams/orders/     # what would change
//	porticoctl apply -f teams/orders/    # change it: a new version
//	porticoctl versions                  # the newest versions
//	porticoctl rollback 41               # a new version equal to 41
//
// API keys and the access-token deny list are the key service's:
//
//	porticoctl keys create --app shop --tenant acme --plan gold   # the key, shown once
//	porticoctl keys rotate KEY_ID --overlap 24h
//	porticoctl keys revoke --app shop --reason "leaked"
//	porticoctl deny add --subject user-42 --issued-before now
//
// Usage totals, the reconciler and the billing export are the quota
// service's:
//
//	porticoctl usage get key:key_01 --period 2026-11
//	porticoctl usage reconcile --period 2026-11 --finalise
//	porticoctl usage export --period 2026-11 -f billing.csv
//
// The server and token come from --server and --token-file, or from
// PORTICO_SERVER and PORTICO_TOKEN; the key service's from --keys-server
// and --keys-token-file, or PORTICO_KEYS_SERVER and PORTICO_KEYS_TOKEN,
// and the quota service's from --quota-server and --quota-token-file, or
// PORTICO_QUOTA_SERVER and PORTICO_QUOTA_TOKEN, else the same as the
// control plane's (portico dev serves all three on one address). Exit status: 0 done, 1 refused or failed (problems listed
// with their field paths), 2 bad usage; a team's CI can gate on it.
// -o json and -o yaml print the answers as JSON or YAML for scripts.
//
// The commands are cobra's: porticoctl help COMMAND, or COMMAND --help,
// says what each takes, and porticoctl completion SHELL prints a
// completion script. The single-dash long flags of earlier releases
// (-team demo) still work.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
