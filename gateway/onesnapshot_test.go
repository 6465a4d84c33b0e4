package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestRequestSeesOneSnapshot: while two snapshots replace each other as
// fast as the node applies them, every request sees the keys, issuers,
// plans and routes of one of them, never a mix. The two differ in each:
//
//   - version a routes /r/ to backend "a", gives key K plan gold (the only
//     plan with the route's product) and has issuer login sign with key A;
//   - version b routes /r/ to backend "b", gives K plan silver (the only
//     plan with the product there) and has login sign with key B.
//
// So a call with K answers "a gold" or "b silver", and one with a token
// signed with A answers "a gold" (a) or 401 (b). A mix shows: K would get
// the other version's plan (a 403, as that plan lacks the product there,
// or "a silver", "b gold"), the token would reach backend b.
func TestRequestSeesOneSnapshot(t *testing.T) {
	t.Parallel()
	backend := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", name, r.Header.Get("X-Auth-Plan"))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	addrA, addrB := backend("a"), backend("b")
	issA, issB := gatewaytest.NewIssuer(t, "login"), gatewaytest.NewIssuer(t, "login")
	key, base := gatewaytest.NewKey(t, "key-k", "app-k", "tenant-1", "gold")
	version := func(name, addr, plan string, is *gatewaytest.Issuer) *configv1.Snapshot {
		rec := proto.CloneOf(base)
		rec.Plan = plan
		return gatewaytest.WithoutAnonymousLimit(&configv1.Snapshot{
			Version:  name,
			Clusters: []*configv1.Cluster{cluster("backend", addr)},
			Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/r/{rest=**}", Cluster: "backend",
				Auth: &configv1.RouteAuth{Product: "p"}}},
			Products: []*configv1.Product{{Name: "p"}, {Name: "other"}},
			Plans:    []*configv1.Plan{{Name: plan, Products: []string{"p"}}, {Name: map[string]string{"gold": "silver", "silver": "gold"}[plan], Products: []string{"other"}}},
			Keys:     []*configv1.KeyRecord{rec},
			Issuers:  []*configv1.Issuer{is.Config(t)},
		})
	}
	a, b := version("a", addrA, "gold", issA), version("b", addrB, "silver", issB)
	g := gatewaytest.Start(t, a, nil)
	token := issA.Mint(t, map[string]any{"sub": "user-1", "plan": "gold"})

	var stop atomic.Bool
	var swaps atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			cfg := a
			if i%2 == 1 {
				cfg = b
			}
			if err := g.Node.Apply(cfg); err != nil {
				t.Errorf("Apply: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()

	allowed := map[string]bool{"key 200 a gold": true, "key 200 b silver": true, "token 200 a gold": true, "token 401 ": true}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer hc.CloseIdleConnections()
			for time.Now().Before(deadline) {
				what, h, v := "key", "X-Api-Key", key
				if c%2 == 1 {
					what, h, v = "token", "Authorization", "Bearer "+token
				}
				req, _ := http.NewRequest("GET", g.URL()+"/r/x", nil)
				req.Header.Set(h, v)
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				out := fmt.Sprintf("%s %d ", what, resp.StatusCode)
				if resp.StatusCode == 200 {
					out += string(body)
				}
				mu.Lock()
				seen[out]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-done
	for out, n := range seen {
		if !allowed[out] {
			t.Errorf("%d calls answered %q: a mix of the two versions", n, out)
		}
	}
	t.Logf("%d swaps; answers: %v", swaps.Load(), seen)
	if seen["key 200 a gold"] == 0 || seen["key 200 b silver"] == 0 {
		t.Errorf("the calls saw one version only (%v): nothing raced", seen)
	}
}
