package keysvc_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/keysvc/store"
	"github.com/portico-gw/portico/testing/ghscan"
	"github.com/portico-gw/portico/testing/testclock"
)

// ghPost posts body with header to s's GitHub path and returns the status
// and the answer's body.
func ghPost(t *testing.T, s *service, method string, header http.Header, body []byte) (int, []byte) {
	t.Helper()
	status, _, b := post(t, method, s.url+keysvc.GitHubLeakPath, header, body)
	return status, b
}

// feedback is GitHub's feedback for one match.
type feedback struct {
	TokenHash string `json:"token_hash"`
	TokenType string `json:"token_type"`
	Label     string `json:"label"`
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestGitHubReport: a report as GitHub sends it, signed by a key of its
// document (the current one or an older one), with several matches, is
// answered 200 with GitHub's feedback in the order of the matches: our
// keys, active or already revoked, true_positive and revoked by GitHub,
// anything else false_positive; never a token. Each match is recorded
// with GitHub as the reporter, its URL and source.
func TestGitHubReport(t *testing.T) {
	t.Parallel()
	current, previous := ghscan.NewKey(t, ""), ghscan.NewKey(t, "")
	ks := ghscan.Start(t, ghscan.DocOf(t, current, previous))
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL}})
	k1, k2, k3, spared := s.create(t, "app-gh"), s.create(t, "app-gh"), s.create(t, "app-gh"), s.create(t, "app-gh")
	unknown := unknownKey(t)
	// k3 with another last checksum digit.
	last := byte('A')
	if k3.GetRawKey()[apikey.Len-1] == last {
		last = 'B'
	}
	badSum := k3.GetRawKey()[:apikey.Len-1] + string(last)
	if _, err := apikey.Parse(badSum); err == nil {
		t.Fatalf("the key with a changed checksum digit parses")
	}
	// k3 was revoked before GitHub found it.
	if status, body := report(t, s, "POST", leakBody(t, leak{Token: k3.GetRawKey(), Type: "portico_api_key", URL: "https://example.com", Source: "other"})); status != 200 {
		t.Fatalf("revoking k3 first: %d %s", status, body)
	}
	const (
		url1 = "https://github.com/someone/repo/blob/0123abc/.env"
		url2 = "https://gist.github.com/someone/0123abcd"
	)
	matches := []leak{
		{Token: k1.GetRawKey(), Type: "portico_api_key", URL: url1, Source: "content"},
		{Token: k2.GetRawKey(), Type: "portico_api_key", URL: url2, Source: "gist"},
		{Token: k1.GetRawKey(), Type: "portico_api_key", URL: url1, Source: "content"},
		{Token: unknown, Type: "portico_api_key", URL: url1, Source: "commit"},
		{Token: k3.GetRawKey(), Type: "portico_test_key", URL: url2, Source: "gist"},
		{Token: badSum, Type: "portico_api_key", URL: url1, Source: "commit"},
		{Token: "not-a-key-at-all", Type: "portico_api_key", URL: "", Source: "npm"},
	}
	body := leakBody(t, matches...)
	seq := s.seq(t)
	status, answer := ghPost(t, s, "POST", current.Sign(t, body), body)
	var got []feedback
	if status != 200 || json.Unmarshal(answer, &got) != nil {
		t.Fatalf("GitHub's report: %d %s, want 200 and feedback", status, answer)
	}
	want := []feedback{
		{sha256Hex(k1.GetRawKey()), "portico_api_key", "true_positive"},
		{sha256Hex(k2.GetRawKey()), "portico_api_key", "true_positive"},
		{sha256Hex(k1.GetRawKey()), "portico_api_key", "true_positive"},
		{sha256Hex(unknown), "portico_api_key", "false_positive"},
		{sha256Hex(k3.GetRawKey()), "portico_test_key", "true_positive"},
		{sha256Hex(badSum), "portico_api_key", "false_positive"},
		{sha256Hex("not-a-key-at-all"), "portico_api_key", "false_positive"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("feedback = %+v\nwant %+v", got, want)
	}
	var fields []map[string]any
	if err := json.Unmarshal(answer, &fields); err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		if len(f) != 3 {
			t.Errorf("feedback[%d] has the fields %v, want token_hash, token_type and label only", i, f)
		}
	}
	for _, m := range matches {
		if strings.Contains(string(answer), m.Token) || strings.Contains(string(answer), m.Token[min(12, len(m.Token)):]) {
			t.Errorf("the answer repeats a reported token: %s", answer)
		}
	}
	if got := s.seq(t); got != seq+2 {
		t.Errorf("the report moved the store's seq from %d to %d, want two revocations (k1, k2)", seq, got)
	}
	for _, c := range []struct {
		id, url, by string
	}{{k1.GetKey().GetKeyId(), url1, "scanner:github"}, {k2.GetKey().GetKeyId(), url2, "scanner:github"}, {k3.GetKey().GetKeyId(), "https://example.com", "scanner:" + scannerID}} {
		k := s.storedKey(t, c.id)
		if k.Status != store.StatusRevoked || k.RevokedBy != c.by || !strings.Contains(k.RevokeReason, c.url) {
			t.Errorf("key %s after the report: %v by %q for %q; want revoked by %s, the reason naming %s", c.id, k.Status, k.RevokedBy, k.RevokeReason, c.by, c.url)
		}
	}
	if k := s.storedKey(t, spared.GetKey().GetKeyId()); k.Status != store.StatusActive {
		t.Errorf("a key GitHub did not report is %v", k.Status)
	}
	reps, err := s.store.LeakReports(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	type recorded struct{ hash, reporter, url, source, outcome string }
	var gotRecs, wantRecs []recorded
	for _, r := range reps {
		if r.Reporter == scannerID {
			continue // k3's first report
		}
		gotRecs = append(gotRecs, recorded{hexHash(r.KeyHash), r.Reporter, r.URL, r.Source, r.Outcome})
	}
	outcomes := []string{store.OutcomeRevoked, store.OutcomeRevoked, store.OutcomeAlreadyRevoked, store.OutcomeUnknown, store.OutcomeAlreadyRevoked, store.OutcomeUnknown, store.OutcomeUnknown}
	for i, m := range matches {
		wantRecs = append(wantRecs, recorded{hexHash(apikey.Hash(m.Token)), "github", m.URL, m.Source, outcomes[i]})
	}
	byAll := func(a, b recorded) int {
		return strings.Compare(strings.Join([]string{a.hash, a.url, a.source, a.outcome}, " "), strings.Join([]string{b.hash, b.url, b.source, b.outcome}, " "))
	}
	slices.SortFunc(gotRecs, byAll)
	slices.SortFunc(wantRecs, byAll)
	if !slices.Equal(gotRecs, wantRecs) {
		t.Errorf("recorded reports = %+v\nwant %+v", gotRecs, wantRecs)
	}

	// A key that is not current still verifies: GitHub may send what it
	// signed before a rotation. The same report again revokes nothing
	// more.
	seq = s.seq(t)
	again := leakBody(t, matches[0])
	if status, answer := ghPost(t, s, "POST", previous.Sign(t, again), again); status != 200 || !strings.Contains(string(answer), `"label":"true_positive"`) {
		t.Errorf("a report signed by the previous key: %d %s, want 200 true_positive", status, answer)
	}
	if got := s.seq(t); got != seq {
		t.Errorf("a replayed report moved the store's seq from %d to %d", seq, got)
	}
	if n := ks.Fetches(); n != 1 {
		t.Errorf("GitHub's keys were fetched %d times, want once", n)
	}
}

// TestGitHubReportRefused: a report that is not verified by one of
// GitHub's keys is 401 and changes nothing: a bad signature, a signature
// of another body, a key GitHub does not list under the identifier,
// missing or malformed headers, an unknown identifier. Several keys under one identifier: any of them verifies.
func TestGitHubReportRefused(t *testing.T) {
	t.Parallel()
	gh := ghscan.NewKey(t, "")
	twin := ghscan.NewKey(t, gh.ID) // another key under the same identifier
	ks := ghscan.Start(t, ghscan.DocOf(t, gh, twin))
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL}})
	key := s.create(t, "app-gh-refused")
	body := leakBody(t, leak{Token: key.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	forger := ghscan.NewKey(t, gh.ID) // claims GitHub's identifier
	stranger := ghscan.NewKey(t, "")  // an identifier GitHub does not list

	withSig := func(h http.Header, sig string) http.Header {
		h = h.Clone()
		h.Set("Github-Public-Key-Signature", sig)
		return h
	}
	without := func(h http.Header, name string) http.Header {
		h = h.Clone()
		h.Del(name)
		return h
	}
	good := gh.Sign(t, body)
	other := leakBody(t, leak{Token: unknownKey(t), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	seq := s.seq(t)
	for _, c := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"signed by a key GitHub does not list", forger.Sign(t, body), "does not verify"},
		{"the signature of another body", gh.Sign(t, other), "does not verify"},
		{"no signature", without(good, "Github-Public-Key-Signature"), "Github-Public-Key-Signature"},
		{"a signature that is not base64", withSig(good, "not base64!"), "Github-Public-Key-Signature"},
		{"a signature that is not ASN.1", withSig(good, base64.StdEncoding.EncodeToString([]byte("0123456789"))), "does not verify"},
		{"no identifier", without(good, "Github-Public-Key-Identifier"), "Github-Public-Key-Identifier"},
		{"an unknown identifier", stranger.Sign(t, body), "names none of GitHub's"},
	} {
		status, answer := ghPost(t, s, "POST", c.header, body)
		var e struct{ Error string }
		if status != http.StatusUnauthorized || json.Unmarshal(answer, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %s, want 401 with an error naming %q", c.name, status, answer, c.want)
		}
		if strings.Contains(string(answer), key.GetRawKey()[12:]) {
			t.Errorf("%s: the answer repeats the key", c.name)
		}
	}
	if got := s.seq(t); got != seq {
		t.Errorf("after refused reports the store's seq is %d, want %d", got, seq)
	}
	if reps, err := s.store.LeakReports(context.Background(), 0); err != nil || len(reps) != 0 {
		t.Errorf("refused reports were recorded: %d (%v)", len(reps), err)
	}
	// The first report loaded the keys; the unknown identifier, within a
	// minute of that, did not load them again (TestGitHubKeyRotation
	// shows the load a minute later).
	if n := ks.Fetches(); n != 1 {
		t.Errorf("GitHub's keys were fetched %d times, want once", n)
	}

	// Either key under the identifier verifies.
	for i, k := range []ghscan.Key{gh, twin} {
		if status, answer := ghPost(t, s, "POST", k.Sign(t, body), body); status != 200 {
			t.Errorf("signed by key %d of the two under the identifier: %d %s, want 200", i+1, status, answer)
		}
	}

	// GitHub's headers on Portico's endpoint: refused, with the way.
	if status, _, answer := post(t, "POST", s.url+keysvc.LeakPath, gh.Sign(t, body), body); status != http.StatusUnauthorized || !strings.Contains(string(answer), keysvc.GitHubLeakPath) {
		t.Errorf("GitHub's report at %s: %d %s, want 401 naming %s", keysvc.LeakPath, status, answer, keysvc.GitHubLeakPath)
	}
}

// TestGitHubReportLimits: GitHub's reports have the limits of every
// report: POST only, 1 MiB, a JSON array of 1 to 1000 matches; a key
// service without GitHub's protocol answers 404 there.
func TestGitHubReportLimits(t *testing.T) {
	t.Parallel()
	gh := ghscan.NewKey(t, "")
	ks := ghscan.Start(t, ghscan.DocOf(t, gh))
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL}})
	key := s.create(t, "app-gh-limits")
	big := leakBody(t, leak{Token: key.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r#" + strings.Repeat("x", 1<<20), Source: "content"})
	seq := s.seq(t)
	for _, c := range []struct {
		name   string
		method string
		body   []byte
		want   int
	}{
		{"GET", "GET", nil, http.StatusMethodNotAllowed},
		{"more than 1 MiB", "POST", big, http.StatusRequestEntityTooLarge},
		{"not JSON", "POST", []byte("token=" + key.GetRawKey()), http.StatusBadRequest},
		{"an empty array", "POST", []byte("[]"), http.StatusBadRequest},
		{"a JSON object", "POST", []byte(`{"token":"` + key.GetRawKey() + `"}`), http.StatusBadRequest},
	} {
		status, answer := ghPost(t, s, c.method, gh.Sign(t, c.body), c.body)
		var e struct{ Error string }
		if status != c.want || json.Unmarshal(answer, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %.200s, want %d with an error", c.name, status, answer, c.want)
		}
	}
	if got := s.seq(t); got != seq {
		t.Errorf("after refused reports the store's seq is %d, want %d", got, seq)
	}

	off := startService(t, keysvc.Options{})
	body := leakBody(t, leak{Token: key.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	if status, answer := ghPost(t, off, "POST", gh.Sign(t, body), body); status != http.StatusNotFound || !strings.Contains(string(answer), "-github-secret-scanning") {
		t.Errorf("GitHub's report to a key service without GitHub's protocol: %d %s, want 404 naming the flag", status, answer)
	}
}

// TestGitHubKeyRotation: a new identifier makes the service load GitHub's
// keys again, at most once a minute, and one load serves every report
// waiting for it; a key GitHub has withdrawn stops verifying once the
// keys are a day old.
func TestGitHubKeyRotation(t *testing.T) {
	t.Parallel()
	old, next, stranger := ghscan.NewKey(t, ""), ghscan.NewKey(t, ""), ghscan.NewKey(t, "")
	ks := ghscan.Start(t, ghscan.DocOf(t, old))
	clk := testclock.New(time.Now())
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL}, Now: clk.Now})
	send := func(k ghscan.Key) (int, []byte) {
		t.Helper()
		body := leakBody(t, leak{Token: unknownKey(t), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
		return ghPost(t, s, "POST", k.Sign(t, body), body)
	}
	expect := func(what string, k ghscan.Key, status int, fetches int32) {
		t.Helper()
		if got, answer := send(k); got != status {
			t.Errorf("%s: %d %s, want %d", what, got, answer, status)
		}
		if n := ks.Fetches(); n != fetches {
			t.Errorf("%s: GitHub's keys fetched %d times in all, want %d", what, n, fetches)
		}
	}
	expect("the first report", old, 200, 1)
	expect("another report", old, 200, 1)

	// GitHub rotates: its document lists the new key first, the old one
	// after.
	ks.Serve(http.StatusOK, ghscan.DocOf(t, next, old))
	clk.Add(30 * time.Second)
	expect("the new key, 30 s after the last load", next, 401, 1)
	clk.Add(31 * time.Second)
	expect("the new key, a minute after the last load", next, 200, 2)
	expect("the old key, still listed", old, 200, 2)

	// Reports with unknown identifiers, all at once: one load.
	clk.Add(time.Minute)
	strangeBody := leakBody(t, leak{Token: unknownKey(t), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	strangeHeader := stranger.Sign(t, strangeBody)
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Go(func() {
			req, err := http.NewRequest("POST", s.url+keysvc.GitHubLeakPath, bytes.NewReader(strangeBody))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header = strangeHeader.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 401 {
			t.Errorf("concurrent report %d with an unknown identifier: %d, want 401", i, st)
		}
	}
	if n := ks.Fetches(); n != 3 {
		t.Errorf("8 concurrent reports with an unknown identifier: GitHub's keys fetched %d times in all, want 3 (one more)", n)
	}
	expect("an unknown identifier again within the minute", stranger, 401, 3)

	// GitHub withdraws the old key: a day after the last load, the keys
	// are loaded again and it no longer verifies.
	ks.Serve(http.StatusOK, ghscan.DocOf(t, next))
	clk.Add(24 * time.Hour)
	expect("the withdrawn key, a day later", old, 401, 4)
	expect("the new key", next, 200, 4)
}

// TestGitHubKeysUnavailable: when GitHub's keys cannot be loaded (an
// error, garbage, a document of no usable key, a fetch that times out)
// a report is answered 503 with Retry-After, never accepted, and changes
// nothing; keys loaded before keep verifying when a later load fails.
func TestGitHubKeysUnavailable(t *testing.T) {
	t.Parallel()
	gh := ghscan.NewKey(t, "")
	ks := ghscan.Start(t, nil)
	clk := testclock.New(time.Now())
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL, FetchTimeout: 300 * time.Millisecond}, Now: clk.Now})
	key := s.create(t, "app-gh-down")
	body := leakBody(t, leak{Token: key.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	send := func() (int, string, []byte) {
		t.Helper()
		status, h, b := post(t, "POST", s.url+keysvc.GitHubLeakPath, gh.Sign(t, body), body)
		return status, h.Get("Retry-After"), b
	}
	// A document whose one key is of a kind GitHub does not use.
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edDER, err := x509.MarshalPKIXPublicKey(edPub)
	if err != nil {
		t.Fatal(err)
	}
	edDoc := ghscan.Doc(t, ghscan.Entry{KeyIdentifier: gh.ID, IsCurrent: true, Key: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: edDER}))})
	seq := s.seq(t)
	var fetches int32
	for _, c := range []struct {
		name string
		set  func()
	}{
		{"GitHub answers 500", func() { ks.Serve(http.StatusInternalServerError, []byte(`{"message":"oops"}`)) }},
		{"GitHub answers garbage", func() { ks.Serve(http.StatusOK, []byte(`<html>`)) }},
		{"a document without keys", func() { ks.Serve(http.StatusOK, []byte(`{"public_keys":[]}`)) }},
		{"a document of no usable key", func() { ks.Serve(http.StatusOK, edDoc) }},
		{"a fetch that times out", func() {
			ks.Serve(http.StatusOK, ghscan.DocOf(t, gh))
			ks.Hold(t)
		}},
	} {
		c.set()
		clk.Add(time.Minute)
		fetches++
		status, retry, answer := send()
		if status != http.StatusServiceUnavailable || retry == "" || !strings.Contains(string(answer), "could not be loaded") {
			t.Errorf("%s: %d (Retry-After %q) %s, want 503 with Retry-After", c.name, status, retry, answer)
		}
		if n := ks.Fetches(); n != fetches {
			t.Errorf("%s: GitHub's keys fetched %d times in all, want %d", c.name, n, fetches)
		}
		// Within the minute, no new fetch: 503 again, not 401.
		if status, _, answer := send(); status != http.StatusServiceUnavailable {
			t.Errorf("%s, again within the minute: %d %s, want 503", c.name, status, answer)
		}
		if n := ks.Fetches(); n != fetches {
			t.Errorf("%s, again within the minute: GitHub's keys fetched %d times in all, want %d", c.name, n, fetches)
		}
	}
	if got := s.seq(t); got != seq {
		t.Errorf("after unverified reports the store's seq is %d, want %d", got, seq)
	}
	if reps, err := s.store.LeakReports(context.Background(), 0); err != nil || len(reps) != 0 {
		t.Errorf("unverified reports were recorded: %d (%v)", len(reps), err)
	}

	// GitHub is back: the report is taken.
	ks.Serve(http.StatusOK, ghscan.DocOf(t, gh))
	clk.Add(time.Minute)
	if status, _, answer := send(); status != 200 {
		t.Fatalf("with GitHub back: %d %s, want 200", status, answer)
	}
	// Then GitHub fails again, and the keys are a day old: the load
	// fails, and the keys loaded before still verify.
	ks.Serve(http.StatusBadGateway, nil)
	clk.Add(25 * time.Hour)
	fetched := ks.Fetches()
	if status, _, answer := send(); status != 200 {
		t.Errorf("with day-old keys and GitHub failing: %d %s, want 200", status, answer)
	}
	if n := ks.Fetches(); n != fetched+1 {
		t.Errorf("day-old keys: GitHub's keys fetched %d more times, want 1", n-fetched)
	}
}

// TestGitHubKeysFile: GitHub's keys from a file in the document's format
// (offline): read at New, which refuses a file it cannot use; read
// again, at most once a minute, for an identifier it lacks.
func TestGitHubKeysFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "github-keys.json")
	old, next := ghscan.NewKey(t, ""), ghscan.NewKey(t, "")
	if err := os.WriteFile(file, ghscan.DocOf(t, old), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(time.Now())
	// The URL is not used: nothing listens there.
	s := startService(t, keysvc.Options{GitHub: &keysvc.GitHubOptions{KeysFile: file, KeysURL: "http://" + closedAddr(t)}, Now: clk.Now})
	send := func(k ghscan.Key) int {
		t.Helper()
		body := leakBody(t, leak{Token: unknownKey(t), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
		status, _ := ghPost(t, s, "POST", k.Sign(t, body), body)
		return status
	}
	if st := send(old); st != 200 {
		t.Errorf("signed by the file's key: %d, want 200", st)
	}
	if err := os.WriteFile(file, ghscan.DocOf(t, next, old), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := send(next); st != 401 {
		t.Errorf("the file's new key, within a minute of reading it: %d, want 401", st)
	}
	clk.Add(time.Minute)
	if st := send(next); st != 200 {
		t.Errorf("the file's new key, a minute later: %d, want 200", st)
	}

	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "refuse.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"public_keys":[{"key_identifier":"x","key":"not PEM","is_current":true}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]string{"a missing file": filepath.Join(dir, "missing.json"), "a file of no usable key": bad} {
		_, err := keysvc.New(keysvc.Options{Store: st, GitHub: &keysvc.GitHubOptions{KeysFile: f}})
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("New with %s: %v, want an error naming it", name, err)
		}
	}
}
