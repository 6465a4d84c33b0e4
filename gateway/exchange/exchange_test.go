package exchange_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
)

func TestWriterRecordsStatusAndBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		write  func(w http.ResponseWriter)
		status int
		bytes  int64
	}{
		{"write only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("hello")) }, 200, 5},
		{"header then writes", func(w http.ResponseWriter) {
			w.WriteHeader(201)
			_, _ = w.Write([]byte("ab"))
			_, _ = w.Write([]byte("cde"))
		}, 201, 5},
		{"an informational answer first", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(404) }, 404, 0},
		{"a second header is not the status", func(w http.ResponseWriter) { w.WriteHeader(502); w.WriteHeader(200) }, 502, 0},
		{"flush", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200, 0},
		{"nothing", func(http.ResponseWriter) {}, 0, 0},
	} {
		var x exchange.Record
		rec := httptest.NewRecorder()
		w := x.Reset(rec, "public", time.Now())
		tc.write(w)
		if x.Status != tc.status || x.BytesOut != tc.bytes {
			t.Errorf("%s: status %d, %d bytes out; want %d, %d", tc.name, x.Status, x.BytesOut, tc.status, tc.bytes)
		}
		if x.By != exchange.Nobody {
			t.Errorf("%s: answered by %v with no one claiming the answer", tc.name, x.By)
		}
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	var x exchange.Record
	w := x.Reset(httptest.NewRecorder(), "partner", time.Unix(1, 0))
	x.Refuse(w, httptest.NewRequest("GET", "/", nil), problem.HTTP, problem.Problem{Code: problem.NoRoute})
	x.Forwarded, x.Retries = true, 2
	now := time.Unix(2, 0)
	x.Reset(httptest.NewRecorder(), "public", now)
	if x.Pool != "public" || !x.Start.Equal(now) || x.By != exchange.Nobody || x.Code != "" || x.Status != 0 || x.Forwarded || x.Retries != 0 {
		t.Errorf("a reset record: %+v", x)
	}
	if got := http.NewResponseController(w).Flush(); got != nil {
		t.Errorf("Flush through ResponseController: %v", got)
	}
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	var x exchange.Record
	rec := httptest.NewRecorder()
	w := x.Reset(rec, "public", time.Now())
	r := httptest.NewRequest("GET", "/nowhere", nil)
	x.Refuse(w, r, problem.HTTP, problem.Problem{Code: problem.NoRoute, Detail: "no route"})
	if x.By != exchange.Gateway || x.Code != problem.NoRoute || x.Status != 404 || rec.Code != 404 || x.BytesOut == 0 {
		t.Errorf("Refuse: by %v code %q status %d (%d written), %d bytes", x.By, x.Code, x.Status, rec.Code, x.BytesOut)
	}
	x.Answered()
	if x.By != exchange.Upstream || x.Code != "" {
		t.Errorf("Answered: by %v code %q", x.By, x.Code)
	}

	// Without a record, the refusal is still written.
	var none *exchange.Record
	rec = httptest.NewRecorder()
	none.Refuse(rec, r, problem.HTTP, problem.Problem{Code: problem.RateLimited})
	none.Answered()
	none.EndedByGateway(problem.Internal)
	if rec.Code != 429 {
		t.Errorf("Refuse without a record wrote %d, want 429", rec.Code)
	}
}
