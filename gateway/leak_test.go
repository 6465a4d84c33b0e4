package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/logbuf"
)

// TestCredentialsNeverLeak runs a mix of good and bad requests carrying
// API keys and tokens, with the node logging at debug level, and looks for
// the raw credentials in everything that leaves the gateway: its logs, what
// the backends received, and what went back to the client.
//
// Not parallel: it also captures the process-wide default logger, which a
// package without a logger of its own would use.
func TestCredentialsNeverLeak(t *testing.T) {
	var upstreamSaw logbuf.Buffer
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(&upstreamSaw, "%s %s\n", r.Method, r.RequestURI)
		_ = r.Header.Write(&upstreamSaw)
		upstreamSaw.Write(body)
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusBadGateway)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(capture.Close)

	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	f.cfg.Clusters = append(f.cfg.Clusters,
		cluster("capture", strings.TrimPrefix(capture.URL, "http://")),
		cluster("dead", deadAddr(t)))
	f.cfg.Routes = append(f.cfg.Routes,
		&configv1.Route{Id: "capture", Team: "t", Path: "/capture/{rest=**}", Cluster: "capture",
			Auth: &configv1.RouteAuth{QueryKey: "api_key"}, MaxRequestBytes: 1024},
		&configv1.Route{Id: "capture-public", Team: "t", Path: "/open/{rest=**}", Cluster: "capture", Auth: gatewaytest.Public},
		&configv1.Route{Id: "dead", Team: "t", Path: "/dead/{rest=**}", Cluster: "dead", Auth: &configv1.RouteAuth{}},
		&configv1.Route{Id: "get-only", Team: "t", Methods: []string{"GET"}, Path: "/getonly", Cluster: "capture", Auth: &configv1.RouteAuth{}},
	)
	f.cfg.DenyList = []*configv1.DenyEntry{{Match: &configv1.DenyEntry_Jti{Jti: "denied-jti"}, Expires: timestamppb.New(time.Now().Add(time.Hour))}}

	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	prev := slog.Default()
	slog.SetDefault(logger)
	t.Cleanup(func() { slog.SetDefault(prev) })
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) { o.Logger = logger })

	good := f.keys["good"]
	token := f.issuer.Mint(t, map[string]any{"scope": "inventory:read orders:read", "plan": "pro"})
	secrets := map[string]string{
		"good key": good, "revoked key": f.keys["revoked"], "expired key": f.keys["expired"],
		"token": token,
	}
	badKey := good[:20] + "Zz" + good[22:] // wrong checksum
	secrets["bad key"] = badKey
	expired := f.issuer.Mint(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	secrets["expired token"] = expired
	deniedTok := f.issuer.Mint(t, map[string]any{"jti": "denied-jti", "plan": "pro"})
	secrets["denied token"] = deniedTok
	tampered := token[:len(token)-6] + "AAAAAA"
	secrets["tampered token"] = tampered
	// Any segment of a token is a secret too.
	for name, tok := range map[string]string{"token": token, "expired token": expired} {
		for i, seg := range strings.Split(tok, ".") {
			secrets[fmt.Sprintf("%s segment %d", name, i)] = seg
		}
	}

	var toClient bytes.Buffer
	client := gatewaytest.HTTP1Client(t)
	h2 := gatewaytest.H2CClient(t)
	send := func(c *http.Client, method, path string, header map[string]string, body string) {
		req, _ := http.NewRequest(method, g.URL()+path, strings.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		_ = resp.Header.Write(&toClient)
		_, _ = io.Copy(&toClient, resp.Body)
		resp.Body.Close()
	}
	for _, c := range []*http.Client{client, h2} {
		for _, cred := range []map[string]string{
			{"X-Api-Key": good}, {"Authorization": "Bearer " + good}, {"Authorization": "Bearer " + token},
			{"X-Api-Key": badKey}, {"X-Api-Key": f.keys["revoked"]}, {"X-Api-Key": f.keys["expired"]},
			{"Authorization": "Bearer " + expired}, {"Authorization": "Bearer " + deniedTok}, {"Authorization": "Bearer " + tampered},
			{"Authorization": "Basic " + good}, {"X-Api-Key": good, "Authorization": "Bearer " + token},
		} {
			send(c, "GET", "/capture/x?q=1", cred, "")
			send(c, "POST", "/capture/x", cred, strings.Repeat("b", 4096)) // 413
			send(c, "GET", "/open/x", cred, "")                            // public: credential dropped
			send(c, "GET", "/dead/x", cred, "")                            // 503 after auth
			send(c, "DELETE", "/getonly", cred, "")                        // 405
			send(c, "GET", "/nowhere", cred, "")                           // 404
			send(c, "GET", "/capture/%2e%2e/%2e%2e/x", cred, "")           // 400
			send(c, "POST", "/inventory/v1/items", cred, "{}")             // 403 for the reader
		}
		send(c, "GET", "/capture/x?api_key="+good+"&z=1", nil, "")
		send(c, "GET", "/capture/x?api_key="+badKey, nil, "")
		send(c, "GET", "/nowhere?api_key="+good, nil, "")
	}

	orders := demov1.NewOrdersServiceClient(g.GRPCConn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, md := range [][]string{
		{"x-api-key", good}, {"authorization", "Bearer " + token}, {"x-api-key", badKey}, {"authorization", "Bearer " + tampered},
	} {
		mctx := metadata.AppendToOutgoingContext(ctx, append(md, "x-demo-echo-md", "x-api-key,authorization")...)
		var header, trailer metadata.MD
		_, err := orders.GetOrder(mctx, &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header), grpc.Trailer(&trailer))
		fmt.Fprintf(&toClient, "%v %v %v\n", err, header, trailer)
	}

	// Let asynchronous log lines (upstream failures) land.
	time.Sleep(50 * time.Millisecond)
	outputs := map[string]string{"logs": logs.String(), "upstream requests": upstreamSaw.String(), "responses": toClient.String()}
	if !strings.Contains(outputs["logs"], "level=DEBUG") && !strings.Contains(outputs["logs"], "level=WARN") {
		t.Fatalf("the node logged nothing at debug/warn level; the test would prove nothing:\n%s", outputs["logs"])
	}
	if !strings.Contains(outputs["upstream requests"], "X-Auth-Key-Id: key-good") {
		t.Fatalf("the capture backend saw no authenticated request; the test would prove nothing")
	}
	for where, out := range outputs {
		for name, secret := range secrets {
			if len(secret) >= 8 && strings.Contains(out, secret) {
				t.Errorf("%s contain the %s", where, name)
			}
		}
		if where != "responses" && strings.Contains(strings.ToLower(out), "authorization:") {
			t.Errorf("%s contain an Authorization header", where)
		}
	}
}

func deadAddr(t *testing.T) string {
	ln := gatewaytest.Listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
