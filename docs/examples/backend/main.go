// Command backend is the smallest backend for trying Portico by hand: it
// answers every request with JSON naming what it received, the verified
// identity headers the gateway adds (x-auth-*) included. The README's
// control plane example routes the orders team's paths to it:
//
//	go run ./docs/examples/backend -listen 127.0.0.1:9000
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	name := flag.String("name", "orders", "the name it answers with")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		identity := map[string]string{}
		for k, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-auth-") {
				identity[strings.ToLower(k)] = strings.Join(v, ",")
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"backend": *name, "method": r.Method, "path": r.URL.Path, "identity": identity,
			"request_id": r.Header.Get("X-Request-Id"),
		})
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("backend %s listening on %s", *name, *listen)
	log.Fatal(srv.ListenAndServe())
}
