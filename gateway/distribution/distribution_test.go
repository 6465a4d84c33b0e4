package distribution_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/distribution"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/testing/logbuf"
)

// pushes is a control plane that sends a node the snapshots in its list,
// one at a time, each after the node's answer to the one before, and
// keeps the answers.
type pushes struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
	list []*distributionv1.Snapshot
	acks chan *distributionv1.Ack
}

func (p *pushes) Stream(ctx context.Context, s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	if _, err := s.Receive(); err != nil { // the hello
		return err
	}
	for _, snap := range p.list {
		ack, err := push(s, snap)
		if err != nil {
			return err
		}
		p.acks <- ack
	}
	<-ctx.Done()
	return nil
}

// push sends snap on a node's stream and returns the node's answer,
// skipping whatever else the node sends before it.
func push(s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse], snap *distributionv1.Snapshot) (*distributionv1.Ack, error) {
	if err := s.Send(&distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_Snapshot{Snapshot: snap}}); err != nil {
		return nil, err
	}
	for {
		m, err := s.Receive()
		if err != nil {
			return nil, err
		}
		if ack := m.GetAck(); ack != nil {
			return ack, nil
		}
	}
}

// encoded is cfg as the control plane sends it: deterministic bytes
// without the sha256 field, and their SHA-256.
func encoded(t *testing.T, cfg *configv1.Snapshot) ([]byte, string) {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// TestOneSHA256PerVersion: what a node logs of the versions it is sent
// names each once, with the sha256 the control plane gave it (what
// porticoctl versions shows): a snapshot it applies (Node.Apply's line),
// one sent by name because the node runs it (a rollback, a change that
// compiles to the same snapshot), and one it refuses.
func TestOneSHA256PerVersion(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	node, err := gateway.New(gateway.Options{Logger: log, Listeners: []gateway.Listener{{Pool: "public", Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)

	good, goodSHA := encoded(t, &configv1.Snapshot{Version: "v3",
		Clusters: []*configv1.Cluster{{Name: "c", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:1"}}}},
		Routes:   []*configv1.Route{{Id: "r", Team: "t", Path: "/r", Cluster: "c", Auth: &configv1.RouteAuth{Public: true, Reviewer: "tests"}}},
	})
	bad, badSHA := encoded(t, &configv1.Snapshot{Version: "v5",
		Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/r", Cluster: "missing", Auth: &configv1.RouteAuth{Public: true, Reviewer: "tests"}}},
	})
	cp := &pushes{acks: make(chan *distributionv1.Ack, 3), list: []*distributionv1.Snapshot{
		{Version: 3, Sha256: goodSHA, Data: good},
		{Version: 4, Sha256: goodSHA}, // by name: the node runs it
		{Version: 5, Sha256: badSHA, Data: bad},
	}}
	mux := http.NewServeMux()
	mux.Handle(distributionv1connect.NewDistributionServiceHandler(cp))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	t.Cleanup(tr.CloseIdleConnections)
	client := distribution.New(distribution.Options{
		URL: srv.URL, HTTPClient: &http.Client{Transport: tr}, NodeID: "n1", Pool: "public",
		Apply: node.Apply, Logger: log,
	})
	runUntilCleanup(t, client)

	deadline := time.After(20 * time.Second)
	for i, want := range []string{"", "", "unknown cluster"} {
		select {
		case ack := <-cp.acks:
			if want == "" && ack.GetError() != "" || want != "" && !strings.Contains(ack.GetError(), want) {
				t.Fatalf("answer %d: %v, want error %q", i, ack, want)
			}
		case <-deadline:
			t.Fatalf("the node answered %d of 3 snapshots within 20s:\n%s", i, logs.String())
		}
	}

	// Every line naming a sha256, by the version it is of ("v3", the
	// snapshot's own name, is version 3).
	attr := regexp.MustCompile(`\bversion=v?(\d+)\b.*\bsha256=([0-9a-f]+)`)
	byVersion := map[string][]string{}
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "sha256=") {
			continue
		}
		m := attr.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("a line names a sha256 but no version: %s", line)
			continue
		}
		byVersion[m[1]] = append(byVersion[m[1]], m[2])
	}
	for version, sha := range map[string]string{"3": goodSHA, "4": goodSHA, "5": badSHA} {
		if got := byVersion[version]; len(got) != 1 || got[0] != sha {
			t.Errorf("version %s: logged sha256 %q, want it once: [%s]\n%s", version, got, sha, logs.String())
		}
	}
	if len(byVersion) != 3 {
		t.Errorf("logged versions %v, want 3, 4 and 5", byVersion)
	}
	if got := node.Current().SHA256; got != goodSHA {
		t.Errorf("the node runs %s, want %s", got, goodSHA)
	}
}

// runUntilCleanup runs client until the test ends, and waits for it to
// stop.
func runUntilCleanup(t *testing.T, client *distribution.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- client.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the client did not stop within 10s")
		}
	})
}
