// Package demo holds the built-in demo backends that `portico dev` starts
// behind the gateway, and that tests and load benchmarks use as real
// upstreams:
//
//   - Orders, the gRPC service portico.demo.v1.OrdersService (one method of
//     each RPC kind) over cleartext HTTP/2, with grpc health and server
//     reflection (v1 and v1alpha) so `grpcurl -plaintext` works through the
//     gateway.
//   - Inventory, a plain REST/JSON service over HTTP/1.1 and h2c.
//
// Start runs both on loopback ports; NewOrdersServer and NewInventoryHandler
// give tests the pieces for listeners of their own.
//
// # Orders
//
// The order store starts with o-1001 (c-42, PENDING), o-1002 (c-42, PAID)
// and o-1003 (c-7, SHIPPED). CreateOrder and ImportOrders add orders; past
// 10,000 added orders the oldest added one is forgotten, so long benchmarks
// run in bounded memory. The seeds are never forgotten.
//
// CreateOrder assigns o-1004, o-1005 and so on, status PENDING, total_cents
// and create_time, whatever the client sent for them. ImportOrders keeps an
// order's id (AlreadyExists if taken), its status unless unspecified and its
// create_time if set. Requests are checked against the rules of orders.proto
// (InvalidArgument), as the gateway's protovalidate would; an unknown order
// is NotFound.
//
// WatchOrders first sends one event per order the customer has, then every
// Options.WatchInterval one event for the next of those orders in turn, with
// the status advanced along PENDING → PAID → SHIPPED → DELIVERED → PENDING.
// The events are made up for the stream: they do not change the store, so
// GetOrder answers stay predictable while streams run. A customer without
// orders gets no events until one is created. SyncOrders does change the
// store.
//
// # Test hooks
//
// The methods of OrdersService obey these request metadata keys, so gateway
// tests need no extra RPCs. Health and reflection ignore them. They apply in
// this order, before the method runs:
//
//	x-demo-echo-md: <name>[,<name>...]
//	    copies every value of each named request metadata key into the
//	    response header x-demo-echo-<name> (a leading ':' is dropped, so
//	    ":authority" comes back as x-demo-echo-authority). Keys the request
//	    lacks, and names that are not valid metadata keys, are skipped.
//	x-demo-trailer: <v>
//	    adds the response trailer x-demo-trailer: <v>.
//	x-demo-delay-ms: <n>
//	    waits n milliseconds (0..600000) before answering; a cancelled or
//	    expired call ends the wait with Canceled or DeadlineExceeded.
//	x-demo-fail: <code>
//	    fails the call with that status code, given as a number (14) or a
//	    name (UNAVAILABLE, Unavailable), and the message
//	    "demo: failure requested by x-demo-fail". Code 0 is rejected.
//	x-demo-close-first: 1
//	    SyncOrders only: after answering the first request the server ends
//	    the stream with OK while the client may still be sending, the
//	    full-duplex case a proxy must not hang on.
//
// A hook value that does not parse fails the call with InvalidArgument.
//
// # Inventory
//
// The item store starts with WIDGET-1, GADGET-2 and GIZMO-3 and holds at most
// 10,000 items (507 beyond). An item is JSON {"sku", "name", "quantity",
// "price_cents"}; the sku matches [A-Z0-9-]{3,32}.
//
//	GET    /inventory/v1/items          list items, JSON {"items": [...]}
//	GET    /inventory/v1/items/{sku}    one item; 404 if unknown
//	POST   /inventory/v1/items          create; 201 with Location, 409 if the sku exists
//	PUT    /inventory/v1/items/{sku}    replace (200) or create (201)
//	DELETE /inventory/v1/items/{sku}    204; 404 if unknown
//	POST   /inventory/v1/upload         streams the body through SHA-256, never
//	                                    holding it whole; JSON {"bytes", "sha256"}
//	GET    /inventory/v1/stream?n=N&size=S
//	                                    N chunks (default 10, at most 1,000,000) of
//	                                    S bytes (default 1024, at most 16 MiB), each
//	                                    flushed; the trailer X-Demo-Checksum carries
//	                                    the hex SHA-256 of the body
//	ANY    /inventory/v1/headers        echoes method, uri, path, raw query, host,
//	                                    proto, remote address, content length,
//	                                    transfer encoding and all headers as JSON
//	GET    /inventory/v1/status/{code}  answers with status code (200..599)
//	GET    /inventory/v1/slow?ms=N      waits N ms (default 0, at most 600000), then
//	                                    JSON {"waited_ms": N}; a client that leaves
//	                                    ends the wait
//	GET    /healthz                     200 "ok"
//
// Errors from these handlers are application/problem+json (RFC 9457). Unknown
// paths and wrong methods are answered by http.ServeMux (404, 405 with Allow).
package demo
