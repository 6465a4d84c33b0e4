package load

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ChildCommand is the hidden first argument with which Run re-executes its
// own binary (Options.Self) as the backend or the baseline proxy, so each
// runs in a process of its own whose CPU can be measured. Every main
// function that calls Run, TestMain included, must call MaybeRunChild first.
const ChildCommand = "portico-load-child"

// MaybeRunChild runs the child role named in the process arguments and
// exits when the process was started by Run as a child; otherwise it returns
// at once.
func MaybeRunChild() {
	if len(os.Args) < 3 || os.Args[1] != ChildCommand {
		return
	}
	if err := runChild(os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", ChildCommand, os.Args[2], err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild serves role until SIGTERM, SIGINT, the end of stdin (the harness
// is gone) or -lifetime, whichever comes first. It prints "listening ADDR"
// on stdout once it accepts connections.
func runChild(role string, args []string) error {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	lifetime := fs.Duration("lifetime", 10*time.Minute, "exit after this long whatever happens")
	backend := fs.String("backend", "", "baseline: address of the backend")
	bufferPool := fs.Bool("buffer-pool", false, "baseline: give the ReverseProxy a pooled copy buffer")
	bodyBytes := fs.Int("body-bytes", 100, "backend: response body size")
	if err := fs.Parse(args); err != nil {
		return err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	ctx, cancelLife := context.WithTimeout(ctx, *lifetime)
	defer cancelLife()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	var handler http.Handler
	switch role {
	case "backend":
		handler = newBackend(*bodyBytes)
	case "baseline":
		if *backend == "" {
			return errors.New("-backend is required")
		}
		handler = newBaseline(*backend, *bufferPool)
	default:
		return fmt.Errorf("unknown role %q", role)
	}

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	fmt.Printf("listening %s\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = srv.Close()
		return nil
	}
}

// newBackend answers every request 200 with a fixed body, as cheaply as
// net/http allows.
func newBackend(size int) http.Handler {
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	if size > 0 {
		body[size-1] = '\n'
	}
	contentType := []string{"text/plain; charset=utf-8"}
	contentLength := []string{strconv.Itoa(size)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = contentType
		h["Content-Length"] = contentLength
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}

// newBaseline is the reference of DESIGN.md: a bare httputil.ReverseProxy
// with a tuned Transport (enough idle connections for every client
// connection, no compression, no HTTP/2 attempt) and nothing logged.
func newBaseline(backend string, bufferPool bool) http.Handler {
	target := &url.URL{Scheme: "http", Host: backend}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0, // no overall limit
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ResponseHeaderTimeout: 15 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	if bufferPool {
		rp.BufferPool = &bufPool{}
	}
	return rp
}

// bufPool is an httputil.BufferPool of 32 KB copy buffers.
type bufPool struct{ p sync.Pool }

func (b *bufPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufPool) Put(buf []byte) { b.p.Put(&buf) }
