package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of the inventory service.
const (
	maxItems        = 10_000  // items the store holds
	maxItemBody     = 1 << 20 // bytes of a create or replace body
	maxItemName     = 200     // bytes of an item name
	maxStreamChunks = 1_000_000
	maxStreamChunk  = 16 << 20 // bytes of one /stream chunk
)

// checksumTrailer is the trailer of /inventory/v1/stream.
const checksumTrailer = "X-Demo-Checksum"

// item is an inventory item as the REST API reads and writes it.
type item struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Quantity   int64  `json:"quantity"`
	PriceCents int64  `json:"price_cents"`
}

func (it item) validate() error {
	switch {
	case !validSKU(it.SKU):
		return fmt.Errorf("sku %q does not match [A-Z0-9-]{3,32}", it.SKU)
	case it.Name == "" || len(it.Name) > maxItemName:
		return fmt.Errorf("name must be 1..%d bytes", maxItemName)
	case it.Quantity < 0:
		return fmt.Errorf("quantity must not be negative, got %d", it.Quantity)
	case it.PriceCents < 0:
		return fmt.Errorf("price_cents must not be negative, got %d", it.PriceCents)
	}
	return nil
}

var (
	errItemNotFound = errors.New("not found")
	errItemExists   = errors.New("already exists")
	errItemsFull    = errors.New("the inventory is full")
)

// items is the in-memory item store. It is safe for concurrent use.
type items struct {
	mu sync.Mutex
	m  map[string]item
}

func newItems() *items {
	s := &items{m: make(map[string]item)}
	for _, it := range []item{
		{SKU: "WIDGET-1", Name: "Widget", Quantity: 100, PriceCents: 1250},
		{SKU: "GADGET-2", Name: "Gadget", Quantity: 25, PriceCents: 4999},
		{SKU: "GIZMO-3", Name: "Gizmo", Quantity: 0, PriceCents: 300},
	} {
		s.m[it.SKU] = it
	}
	return s
}

// list returns all items ordered by SKU.
func (s *items) list() []item {
	s.mu.Lock()
	all := make([]item, 0, len(s.m))
	for _, it := range s.m {
		all = append(all, it)
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b item) int { return strings.Compare(a.SKU, b.SKU) })
	return all
}

func (s *items) get(sku string) (item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.m[sku]
	if !ok {
		return item{}, fmt.Errorf("item %q: %w", sku, errItemNotFound)
	}
	return it, nil
}

// put stores it. With create set, an existing SKU is errItemExists; otherwise
// it is replaced. It reports whether the item is new.
func (s *items) put(it item, create bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, exists := s.m[it.SKU]
	switch {
	case exists && create:
		return false, fmt.Errorf("item %q: %w", it.SKU, errItemExists)
	case !exists && len(s.m) >= maxItems:
		return false, errItemsFull
	}
	s.m[it.SKU] = it
	return !exists, nil
}

func (s *items) delete(sku string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[sku]; !ok {
		return fmt.Errorf("item %q: %w", sku, errItemNotFound)
	}
	delete(s.m, sku)
	return nil
}

// NewInventoryHandler returns the handler of the inventory REST service, with
// its own item store. It is safe for concurrent use. The zero Options work.
func NewInventoryHandler(opts Options) http.Handler {
	opts = opts.withDefaults()
	inv := &inventory{items: newItems()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /inventory/v1/items", inv.list)
	mux.HandleFunc("POST /inventory/v1/items", inv.create)
	mux.HandleFunc("GET /inventory/v1/items/{sku}", inv.get)
	mux.HandleFunc("PUT /inventory/v1/items/{sku}", inv.replace)
	mux.HandleFunc("DELETE /inventory/v1/items/{sku}", inv.delete)
	mux.HandleFunc("POST /inventory/v1/upload", upload)
	mux.HandleFunc("GET /inventory/v1/stream", stream)
	mux.HandleFunc("/inventory/v1/headers", echoRequest)
	mux.HandleFunc("GET /inventory/v1/status/{code}", answerStatus)
	mux.HandleFunc("GET /inventory/v1/slow", slow)
	mux.HandleFunc("GET /healthz", healthz)
	return logRequests(opts.Logger, mux)
}

// inventory serves the item endpoints.
type inventory struct {
	items *items
}

func (inv *inventory) list(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Items []item `json:"items"`
	}{inv.items.list()})
}

func (inv *inventory) get(w http.ResponseWriter, r *http.Request) {
	it, err := inv.items.get(r.PathValue("sku"))
	if err != nil {
		writeItemError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (inv *inventory) create(w http.ResponseWriter, r *http.Request) {
	it, ok := readItem(w, r)
	if !ok {
		return
	}
	if _, err := inv.items.put(it, true); err != nil {
		writeItemError(w, err)
		return
	}
	w.Header().Set("Location", itemPath(it.SKU))
	writeJSON(w, http.StatusCreated, it)
}

// replace stores the item under the SKU of the path. The body may leave out
// the SKU, but must not name another one.
func (inv *inventory) replace(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	it, ok := readItem(w, r)
	if !ok {
		return
	}
	if it.SKU == "" {
		it.SKU = sku
		if err := it.validate(); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if it.SKU != sku {
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("body sku %q does not match path sku %q", it.SKU, sku))
		return
	}
	created, err := inv.items.put(it, false)
	if err != nil {
		writeItemError(w, err)
		return
	}
	if created {
		w.Header().Set("Location", itemPath(it.SKU))
		writeJSON(w, http.StatusCreated, it)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (inv *inventory) delete(w http.ResponseWriter, r *http.Request) {
	if err := inv.items.delete(r.PathValue("sku")); err != nil {
		writeItemError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readItem decodes the item of a create or replace request. An item without a
// SKU passes unvalidated, for replace to fill in; otherwise it is validated.
// On failure readItem has written the error and reports false.
func readItem(w http.ResponseWriter, r *http.Request) (item, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			writeProblem(w, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q is not JSON", ct))
			return item{}, false
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxItemBody))
	dec.DisallowUnknownFields()
	var it item
	err := dec.Decode(&it)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", maxItemBody))
			return item{}, false
		}
		writeProblem(w, http.StatusBadRequest, "invalid item JSON: "+err.Error())
		return item{}, false
	}
	if it.SKU != "" {
		if err := it.validate(); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return item{}, false
		}
	}
	return it, true
}

// writeItemError maps the errors of the item store to problems; it is the one
// place where the service does so.
func writeItemError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errItemNotFound):
		writeProblem(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errItemExists):
		writeProblem(w, http.StatusConflict, err.Error())
	case errors.Is(err, errItemsFull):
		writeProblem(w, http.StatusInsufficientStorage, err.Error())
	default:
		writeProblem(w, http.StatusInternalServerError, "internal error")
	}
}

func itemPath(sku string) string { return "/inventory/v1/items/" + sku }

// upload hashes the request body as it arrives, in buffers of 32 KiB, so that
// a body of any size passes in constant memory.
func upload(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("reading the body after %d bytes: %v", n, err))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	}{n, hex.EncodeToString(h.Sum(nil))})
}

// stream writes n chunks of size bytes, flushing each, and then the hex
// SHA-256 of the body in the trailer X-Demo-Checksum. Chunk i holds the
// letter 'a'+i%26 only, so a client can check the body without the trailer.
func stream(w http.ResponseWriter, r *http.Request) {
	n, err := queryInt(r, "n", 10, maxStreamChunks)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	size, err := queryInt(r, "size", 1024, maxStreamChunk)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Trailer", checksumTrailer)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	h := sha256.New()
	chunk := make([]byte, size)
	for i := range n {
		if r.Context().Err() != nil {
			return
		}
		fill(chunk, 'a'+byte(i%26))
		h.Write(chunk)
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	w.Header().Set(checksumTrailer, hex.EncodeToString(h.Sum(nil)))
}

func fill(b []byte, c byte) {
	if len(b) == 0 {
		return
	}
	b[0] = c
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// requestEcho is what /inventory/v1/headers answers: the request as the
// server saw it.
type requestEcho struct {
	Method           string      `json:"method"`
	URI              string      `json:"uri"` // the request target, unmodified
	Path             string      `json:"path"`
	RawQuery         string      `json:"raw_query"`
	Host             string      `json:"host"`
	Proto            string      `json:"proto"`
	RemoteAddr       string      `json:"remote_addr"`
	ContentLength    int64       `json:"content_length"` // -1: unknown
	TransferEncoding []string    `json:"transfer_encoding"`
	Headers          http.Header `json:"headers"`
}

// echoRequest answers any method with the request's line and headers, so
// tests can check what a gateway forwarded, stripped and added.
func echoRequest(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, requestEcho{
		Method:           r.Method,
		URI:              r.RequestURI,
		Path:             r.URL.Path,
		RawQuery:         r.URL.RawQuery,
		Host:             r.Host,
		Proto:            r.Proto,
		RemoteAddr:       r.RemoteAddr,
		ContentLength:    r.ContentLength,
		TransferEncoding: r.TransferEncoding,
		Headers:          r.Header,
	})
}

// answerStatus answers with the status code of the path: a problem for 4xx
// and 5xx, no body for 204 and 304, and {"status": code} otherwise.
func answerStatus(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.PathValue("code"))
	if err != nil || code < 200 || code > 599 {
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("status %q is not a number in 200..599", r.PathValue("code")))
		return
	}
	switch {
	case code == http.StatusNoContent || code == http.StatusNotModified:
		w.WriteHeader(code)
	case code >= 400:
		writeProblem(w, code, "status requested by the path")
	default:
		writeJSON(w, code, struct {
			Status int `json:"status"`
		}{code})
	}
}

// slow waits ms milliseconds, then answers. A request cancelled while waiting
// gets no answer.
func slow(w http.ResponseWriter, r *http.Request) {
	ms, err := queryInt(r, "ms", 0, int(maxDelay.Milliseconds()))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := sleep(r.Context(), time.Duration(ms)*time.Millisecond); err != nil {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		WaitedMS int `json:"waited_ms"`
	}{ms})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok")
}

// queryInt reads the query parameter name as an integer in 0..limit, def if
// it is absent.
func queryInt(r *http.Request, name string, def, limit int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > limit {
		return 0, fmt.Errorf("query parameter %s=%q is not a number in 0..%d", name, s, limit)
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is out; a failed write means the client is gone.
	_ = json.NewEncoder(w).Encode(v)
}

// problem is an RFC 9457 problem detail.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, code int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(problem{
		Type:   "about:blank",
		Title:  http.StatusText(code),
		Status: code,
		Detail: detail,
	})
}

// logRequests logs every request at debug level, and costs nothing more when
// that level is off.
func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		log.LogAttrs(r.Context(), slog.LevelDebug, "demo: inventory request",
			slog.String("method", r.Method),
			slog.String("uri", r.RequestURI),
			slog.String("proto", r.Proto),
			slog.Int("status", rec.status),
			slog.Duration("duration", time.Since(start)),
		)
	})
}

// statusRecorder remembers the status a handler wrote. Unwrap lets
// http.ResponseController reach the flusher underneath.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
