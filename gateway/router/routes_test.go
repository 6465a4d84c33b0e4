package router_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/portico-gw/portico/gateway/router"
)

// This file generates a realistic route table for benchmarks: 300 services of 17
// operations each, cut to 5,000 routes, spread over exact, wildcard and no hosts,
// with REST shapes, custom verbs, resource-name variables, a "**" file path, gRPC
// methods and header-versioned routes.

const (
	benchServices = 300
	benchRoutes   = 5000
)

var benchCollections = []string{"orders", "users", "invoices", "shipments", "carts", "products", "accounts", "tickets"}

// benchHost returns the host a service's routes list, or "" for any host, and a
// request host that reaches it.
func benchHost(svc int) (route, request string) {
	switch svc % 10 {
	case 0, 1, 2, 3, 4:
		return "api.example.com", "api.example.com"
	case 5, 6:
		return "partner.example.com", "partner.example.com"
	case 7, 8:
		return "*.eu.example.com", "fr.eu.example.com"
	}
	return "", "api.example.com"
}

func benchRouteSet() []router.Route[string] {
	var routes []router.Route[string]
	for s := 0; s < benchServices; s++ {
		host, _ := benchHost(s)
		var hosts []string
		if host != "" {
			hosts = []string{host}
		}
		svc := fmt.Sprintf("svc%03d", s)
		coll := benchCollections[s%len(benchCollections)]
		grpc := fmt.Sprintf("/acme.%s.v1.Svc%03dService/", svc, s)
		base := "/v1/" + svc + "/" + coll
		add := func(op, method, path string, headers ...router.HeaderMatch) {
			id := svc + "." + op
			routes = append(routes, router.Route[string]{
				ID: id, Hosts: hosts, Methods: []string{method}, Path: path, Headers: headers, Value: id,
			})
		}
		add("list", "GET", base)
		add("create", "POST", base)
		add("get", "GET", base+"/{id}")
		add("update", "PATCH", base+"/{id}")
		add("delete", "DELETE", base+"/{id}")
		add("cancel", "POST", base+"/{id}:cancel")
		add("get-v2", "GET", base+"/{id}", router.HeaderMatch{Name: "X-Api-Version", Value: "2"})
		add("items", "GET", "/v2/"+svc+"/"+coll+"/{id}/items")
		add("item", "GET", "/v2/"+svc+"/"+coll+"/{id}/items/{item_id}")
		add("location", "GET", "/v1/"+svc+"/{name=projects/*/locations/*}")
		add("jobs", "GET", "/v1/"+svc+"/{parent=projects/*/locations/*}/jobs")
		add("run", "POST", "/v1/"+svc+"/{name=projects/*/locations/*/jobs/*}:run")
		add("files", "GET", "/v1/"+svc+"/files/{path=**}")
		add("grpc-get", "POST", grpc+"GetThing")
		add("grpc-list", "POST", grpc+"ListThings")
		add("grpc-create", "POST", grpc+"CreateThing")
		add("grpc-watch", "POST", grpc+"WatchThings")
	}
	return routes[:benchRoutes]
}

// benchRequest is a request with a label for the kind of traffic it stands for.
type benchRequest struct {
	kind string
	req  router.Request
}

// benchRequests returns n requests against benchRouteSet: mostly hits of every
// shape, some misses (404) and some wrong methods (405).
func benchRequests(n int) []benchRequest {
	rng := rand.New(rand.NewPCG(42, 42))
	out := make([]benchRequest, 0, n)
	for len(out) < n {
		s := rng.IntN(benchServices - 10) // the last services lost routes to the cut
		_, host := benchHost(s)
		svc := fmt.Sprintf("svc%03d", s)
		coll := benchCollections[s%len(benchCollections)]
		id := fmt.Sprintf("%d", rng.IntN(1_000_000))
		base := "/v1/" + svc + "/" + coll
		r := router.Request{Host: host, Method: "GET", Header: map[string][]string{
			"Content-Type": {"application/json"},
			"User-Agent":   {"bench/1.0"},
		}}
		kind := ""
		switch rng.IntN(14) {
		case 0:
			kind, r.Path = "rest-list", base
		case 1:
			kind, r.Path = "rest-get", base+"/"+id
		case 2:
			kind, r.Method, r.Path = "rest-verb", "POST", base+"/"+id+":cancel"
		case 3:
			kind, r.Path = "rest-v2-item", "/v2/"+svc+"/"+coll+"/"+id+"/items/"+fmt.Sprint(rng.IntN(100))
		case 4:
			kind, r.Path = "rest-header", base+"/"+id
			r.Header["X-Api-Version"] = []string{"2"}
		case 5:
			kind, r.Path = "rest-resource", "/v1/"+svc+"/projects/p"+id+"/locations/europe-west1/jobs"
		case 6:
			kind, r.Path = "rest-files", "/v1/"+svc+"/files/a/b/c/"+id+".txt"
		case 7, 8, 9:
			kind, r.Method = "grpc", "POST"
			r.Path = fmt.Sprintf("/acme.%s.v1.Svc%03dService/%s", svc, s, []string{"GetThing", "ListThings", "CreateThing", "WatchThings"}[rng.IntN(4)])
			r.Header["Content-Type"] = []string{"application/grpc"}
		case 10:
			kind, r.Path = "miss-404", base+"/"+id+"/unknown/segment"
		case 11:
			kind, r.Method, r.Path = "miss-405", "PUT", base+"/"+id
		case 12:
			kind, r.Path = "miss-404-grpc", fmt.Sprintf("/acme.%s.v1.Svc%03dService/Nope", svc, s)
			r.Method = "POST"
		case 13:
			kind, r.Path = "other-host", base
			r.Host = "unknown.example.org"
		}
		out = append(out, benchRequest{kind: kind, req: r})
	}
	return out
}
