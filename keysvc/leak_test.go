package keysvc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/keysvc/store"
)

// leak is one reported key, as scanners send it.
type leak struct {
	Token  string `json:"token"`
	Type   string `json:"type"`
	URL    string `json:"url"`
	Source string `json:"source"`
}

// answer is the service's answer for one reported key.
type answer struct {
	TokenPrefix string `json:"token_prefix"`
	KeyID       string `json:"key_id"`
	Outcome     string `json:"outcome"`
}

func leakBody(t *testing.T, leaks ...leak) []byte {
	t.Helper()
	b, err := json.Marshal(leaks)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// report posts body to the scanners' endpoint with method, signed by
// s's scanner now, and returns the status and the answer's body.
func report(t *testing.T, s *service, method string, body []byte) (int, []byte) {
	t.Helper()
	h, err := keysvc.SignReport(scannerID, s.scanner, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	status, _, b := post(t, method, s.url+keysvc.LeakPath, h, body)
	return status, b
}

// post sends body with header to url and returns the answer's status,
// headers and body, which must be JSON, as every answer of the scanners'
// endpoints is.
func post(t *testing.T, method, url string, header http.Header, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	// Far above any wait of the service's: a report is always answered.
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return resp.StatusCode, resp.Header, b
}

// unknownKey is a well-formed key no service issued.
func unknownKey(t *testing.T) string {
	t.Helper()
	k, err := apikey.Generate(apikey.Live, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestLeakReportLimits: a report that is not a POST, too large, not a
// JSON array, empty or of more than 1000 keys is refused, though signed
// correctly, and changes nothing; the largest report accepted is 1 MiB of
// at most 1000 keys.
func TestLeakReportLimits(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	key := s.create(t, "app-limits")
	raw := key.GetRawKey()
	found := leak{Token: raw, Type: "portico_api_key", URL: "https://github.com/o/r/blob/main/.env", Source: "content"}

	// bodyOf returns a report of found padded, by its URL, to n bytes.
	bodyOf := func(n int) []byte {
		l := found
		l.URL += "#"
		l.URL += strings.Repeat("x", n-len(leakBody(t, l)))
		b := leakBody(t, l)
		if len(b) != n {
			t.Fatalf("a padded report has %d bytes, want %d", len(b), n)
		}
		return b
	}
	tooMany := make([]leak, 1001)
	for i := range tooMany {
		tooMany[i] = leak{Token: fmt.Sprintf("ak_live_unknown%d", i), Type: "portico_api_key", URL: found.URL, Source: "content"}
	}
	tooMany[1000] = found

	seq := s.seq(t)
	for _, c := range []struct {
		name   string
		method string
		body   []byte
		want   int
	}{
		{"GET", "GET", nil, http.StatusMethodNotAllowed},
		{"PUT", "PUT", leakBody(t, found), http.StatusMethodNotAllowed},
		{"a body of 1 MiB and a byte", "POST", bodyOf(1<<20 + 1), http.StatusRequestEntityTooLarge},
		{"a body of 2 MiB", "POST", bodyOf(2 << 20), http.StatusRequestEntityTooLarge},
		{"not JSON", "POST", []byte("token=" + raw), http.StatusBadRequest},
		{"a JSON object", "POST", []byte(`{"token": "` + raw + `"}`), http.StatusBadRequest},
		{"a JSON array of strings", "POST", []byte(`["` + raw + `"]`), http.StatusBadRequest},
		{"an empty body", "POST", nil, http.StatusBadRequest},
		{"an empty array", "POST", []byte("[]"), http.StatusBadRequest},
		{"null", "POST", []byte("null"), http.StatusBadRequest},
		{"1001 keys", "POST", leakBody(t, tooMany...), http.StatusBadRequest},
	} {
		status, body := report(t, s, c.method, c.body)
		var e struct{ Error string }
		if status != c.want || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %.200s, want %d with an error", c.name, status, body, c.want)
		}
		if strings.Contains(string(body), raw[12:]) {
			t.Errorf("%s: the answer repeats the key: %.200s", c.name, body)
		}
	}
	if got := s.seq(t); got != seq {
		t.Errorf("after refused reports the store's seq is %d, want %d", got, seq)
	}
	if k := s.storedKey(t, key.GetKey().GetKeyId()); k.Status != store.StatusActive {
		t.Errorf("after refused reports the key is %v, want active", k.Status)
	}
	if reps, err := s.store.LeakReports(context.Background(), 0); err != nil || len(reps) != 0 {
		t.Errorf("refused reports were recorded: %d (%v)", len(reps), err)
	}

	// The largest report accepted: 1000 keys; 1 MiB.
	most := slices.Clone(tooMany[:1000])
	if status, body := report(t, s, "POST", leakBody(t, most...)); status != 200 {
		t.Errorf("a report of 1000 keys: %d %.200s, want 200", status, body)
	}
	status, body := report(t, s, "POST", bodyOf(1<<20))
	var answers []answer
	if status != 200 || json.Unmarshal(body, &answers) != nil || len(answers) != 1 || answers[0].Outcome != store.OutcomeRevoked {
		t.Errorf("a report of 1 MiB: %d %.200s, want 200, the key revoked", status, body)
	}
	if reps, err := s.store.LeakReports(context.Background(), 0); err != nil || len(reps) != 1000 {
		t.Errorf("after reports of 1000 keys and of one, %d reports are recorded (%v), want the newest 1000", len(reps), err)
	}
}

// TestLeakReportKeys: each reported key is answered in the order
// reported, a key reported twice is revoked once, and every report is
// recorded with the URL and source it was found at.
func TestLeakReportKeys(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	k1, k2, k3, spared := s.create(t, "app-leak"), s.create(t, "app-leak"), s.create(t, "app-leak"), s.create(t, "app-leak")
	unknown := unknownKey(t)
	const (
		url1 = "https://github.com/someone/repo/blob/main/.env"
		url2 = "https://gist.github.com/someone/0123abcd"
	)
	leaks := []leak{
		{Token: k1.GetRawKey(), Type: "portico_api_key", URL: url1, Source: "content"},
		{Token: k2.GetRawKey(), Type: "portico_api_key", URL: url2, Source: "content"},
		{Token: k1.GetRawKey(), Type: "portico_api_key", URL: url1, Source: "content"},
		{Token: unknown, Type: "portico_api_key", URL: url1, Source: "content"},
		{Token: k3.GetRawKey(), Type: "portico_api_key", URL: url2, Source: "commit"},
		{Token: "not-a-key-at-all", Type: "portico_api_key", URL: url2, Source: "commit"},
	}
	seq := s.seq(t)
	status, body := report(t, s, "POST", leakBody(t, leaks...))
	var got []answer
	if status != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("report: %d %s", status, body)
	}
	want := []answer{
		{k1.GetRawKey()[:12], k1.GetKey().GetKeyId(), store.OutcomeRevoked},
		{k2.GetRawKey()[:12], k2.GetKey().GetKeyId(), store.OutcomeRevoked},
		{k1.GetRawKey()[:12], k1.GetKey().GetKeyId(), store.OutcomeAlreadyRevoked},
		{unknown[:12], "", store.OutcomeUnknown},
		{k3.GetRawKey()[:12], k3.GetKey().GetKeyId(), store.OutcomeRevoked},
		{"", "", store.OutcomeUnknown}, // nothing of what is not a key is shown
	}
	if !slices.Equal(got, want) {
		t.Errorf("answers = %+v, want %+v", got, want)
	}
	for _, l := range leaks {
		if secret := l.Token[min(12, len(l.Token)):]; secret != "" && strings.Contains(string(body), secret) {
			t.Errorf("the answer repeats a reported key: %s", body)
		}
	}
	if got := s.seq(t); got != seq+3 {
		t.Errorf("the report moved the store's seq from %d to %d, want three revocations", seq, got)
	}
	for _, c := range []struct {
		key *store.Key
		url string
	}{
		{ptr(s.storedKey(t, k1.GetKey().GetKeyId())), url1},
		{ptr(s.storedKey(t, k2.GetKey().GetKeyId())), url2},
		{ptr(s.storedKey(t, k3.GetKey().GetKeyId())), url2},
	} {
		if c.key.Status != store.StatusRevoked || c.key.RevokedBy != "scanner:"+scannerID || !strings.Contains(c.key.RevokeReason, c.url) {
			t.Errorf("key %s after the report: %v by %q for %q; want revoked by scanner:%s, the reason naming %s",
				c.key.ID, c.key.Status, c.key.RevokedBy, c.key.RevokeReason, scannerID, c.url)
		}
	}
	if k := s.storedKey(t, spared.GetKey().GetKeyId()); k.Status != store.StatusActive {
		t.Errorf("a key nobody reported is %v", k.Status)
	}

	reps, err := s.store.LeakReports(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != len(leaks) {
		t.Fatalf("%d reports recorded, want %d: %+v", len(reps), len(leaks), reps)
	}
	// Every reported key once per time it was reported, with where it was
	// found and what became of it.
	type recorded struct {
		hash, url, source, keyID, outcome, who string
	}
	var gotRecs, wantRecs []recorded
	for _, r := range reps {
		gotRecs = append(gotRecs, recorded{hexHash(r.KeyHash), r.URL, r.Source, r.KeyID, r.Outcome, r.Reporter})
	}
	for i, l := range leaks {
		wantRecs = append(wantRecs, recorded{hexHash(apikey.Hash(l.Token)), l.URL, l.Source, want[i].KeyID, want[i].Outcome, scannerID})
	}
	key := func(r recorded) string { return strings.Join([]string{r.hash, r.url, r.source, r.outcome}, " ") }
	slices.SortFunc(gotRecs, func(a, b recorded) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(wantRecs, func(a, b recorded) int { return strings.Compare(key(a), key(b)) })
	if !slices.Equal(gotRecs, wantRecs) {
		t.Errorf("recorded reports = %+v, want %+v", gotRecs, wantRecs)
	}
}

func ptr[T any](v T) *T { return &v }

// hexHash is the start of a hash, enough to tell the test's apart.
func hexHash(h [32]byte) string { return fmt.Sprintf("%x", h[:6]) }
