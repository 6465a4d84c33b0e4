package main_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestDevLogsVersionSHA256: the node of portico dev logs each version it
// runs once, with the sha256 porticoctl versions shows for it (the control
// plane's), for the seeded versions and for one put afterwards.
func TestDevLogsVersionSHA256(t *testing.T) {
	t.Parallel()
	addr, tlsAddr, ctlAddr, dataDir := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	p := start(t, "dev", "-addr", addr, "-tls-addr", tlsAddr, "-control-addr", ctlAddr, "-data-dir", dataDir)
	p.waitLine(t, regexp.MustCompile(`Ctrl-C drains`))

	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, "platform-token"))
	if err != nil {
		t.Fatal(err)
	}
	api := admintest.Client("http://"+ctlAddr, strings.TrimSpace(string(tokenBytes)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := api.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "demo", Route: &configv1.Route{
		Id: "inventory-v2", Path: "/inventory/v2/{rest=**}", Cluster: "inventory", Auth: &configv1.RouteAuth{Public: true, Reviewer: "dev-test"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	last := put.Msg.GetChange().GetVersion().GetNumber()

	// Every line that names a sha256, by version ("v3", the snapshot's
	// own name, is version 3).
	attr := regexp.MustCompile(`\bversion=v?(\d+)\b.*\bsha256=([0-9a-f]+)`)
	logged := func() map[int64][]string {
		out := map[int64][]string{}
		for _, line := range strings.Split(p.output(), "\n") {
			if m := attr.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				out[n] = append(out[n], m[2])
			}
		}
		return out
	}
	gatewaytest.WaitFor(t, 20*time.Second, "the node's log line of the version put", func() bool { return len(logged()[last]) > 0 })

	versions, err := api.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: 100}))
	if err != nil {
		t.Fatal(err)
	}
	byVersion := logged()
	for _, v := range versions.Msg.GetVersions() {
		got, ran := byVersion[v.GetNumber()]
		if !ran {
			continue // a version the node never ran (the seed's first steps, superseded before it connected)
		}
		if len(got) != 1 || got[0] != v.GetSha256() {
			t.Errorf("version %d: the node logged sha256 %q, want it once: [%s] (porticoctl versions shows %s)",
				v.GetNumber(), got, v.GetSha256(), v.GetSha256()[:12])
		}
		delete(byVersion, v.GetNumber())
	}
	for n, shas := range byVersion {
		t.Errorf("the node logged version %d (sha256 %q), which the control plane does not list", n, shas)
	}
}
