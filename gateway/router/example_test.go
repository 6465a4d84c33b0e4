package router_test

import (
	"fmt"

	"github.com/portico-gw/portico/gateway/router"
)

func Example() {
	tbl, err := router.New([]router.Route[string]{
		{ID: "get-order", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}, Path: "/v1/orders/{id}", Value: "orders"},
		{ID: "cancel-order", Hosts: []string{"api.example.com"}, Methods: []string{"POST"}, Path: "/v1/orders/{id}:cancel", Value: "orders"},
		{ID: "grpc", Methods: []string{"POST"}, Path: "/acme.orders.v1.OrderService/*", Value: "orders-grpc"},
	})
	if err != nil {
		panic(err)
	}
	var ps router.Params
	for _, req := range []router.Request{
		{Host: "api.example.com", Method: "POST", Path: "/v1/orders/42:cancel"},
		{Host: "api.example.com", Method: "GET", Path: "/v1/orders/42"},
		{Host: "api.example.com", Method: "DELETE", Path: "/v1/orders/42"},
		{Host: "other.example.com", Method: "POST", Path: "/acme.orders.v1.OrderService/GetOrder"},
	} {
		v, st := tbl.Match(req, &ps)
		id, _ := ps.Get("id")
		fmt.Printf("%s %s: %v %q id=%q", req.Method, req.Path, st, v, id)
		if st == router.MethodNotAllowed {
			fmt.Printf(" allow=%v", tbl.Allowed(req))
		}
		fmt.Println()
	}
	// Output:
	// POST /v1/orders/42:cancel: Matched "orders" id="42"
	// GET /v1/orders/42: Matched "orders" id="42"
	// DELETE /v1/orders/42: MethodNotAllowed "" id="" allow=[GET HEAD]
	// POST /acme.orders.v1.OrderService/GetOrder: Matched "orders-grpc" id=""
}

func ExampleCompileError() {
	_, err := router.New([]router.Route[string]{
		{ID: "orders-get", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}, Path: "/v1/orders/{id}"},
		{ID: "orders-get-v2", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}, Path: "/v1/orders/{order_id}"},
		{ID: "broken", Path: "/v1/{name=**}/tail"},
	})
	fmt.Println(err)
	// Output:
	// router: 2 problems:
	// 	route "broken": invalid path template "/v1/{name=**}/tail" at offset 10: '**' must be the last segment
	// 	routes "orders-get" and "orders-get-v2" are ambiguous: same host "api.example.com", method GET and path shape /v1/orders/*
}
