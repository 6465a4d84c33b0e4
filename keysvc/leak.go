package keysvc

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/keysvc/store"
)

// LeakPath is where secret scanners other than GitHub post leaked keys,
// signed with Portico's scheme (GitHub's own protocol has its path,
// GitHubLeakPath).
//
// The request is a JSON array of reports, in the shape GitHub's secret
// scanning partner programme uses:
//
//	[{"token": "ak_live_…", "type": "portico_api_key", "url": "https://…", "source": "content"}]
//
// with three headers:
//
//	Portico-Scanner-Id:        the scanner's configured id
//	Portico-Scanner-Timestamp: Unix seconds when the scanner signed it
//	Portico-Scanner-Signature: base64 of the ASN.1 ECDSA P-256 signature,
//	                           by the scanner's key, of SHA-256(timestamp + "." + body)
//
// A report that is not signed by a configured scanner, or whose timestamp
// is more than ReplayWindow from the service's clock, is refused (401)
// and changes nothing. Otherwise every reported key is hashed, a matching
// key revoked, and the report recorded (reporter, URL, source); the answer
// is a JSON array in the same order:
//
//	[{"token_prefix": "ak_live_Ab3x", "key_id": "key_…", "outcome": "revoked"}]
//
// where outcome is "revoked", "already_revoked" or "unknown". The answer
// never repeats a reported key.
const LeakPath = "/v1/leaked-keys"

// ReplayWindow is how far a report's timestamp may be from the clock.
const ReplayWindow = 5 * time.Minute

// Limits of one report.
const (
	maxLeakBody    = 1 << 20
	maxLeakReports = 1000
)

// leakReport is one reported key.
type leakReport struct {
	Token  string `json:"token"`
	Type   string `json:"type"`
	URL    string `json:"url"`
	Source string `json:"source"`
}

// leakAnswer is the answer for one reported key.
type leakAnswer struct {
	TokenPrefix string `json:"token_prefix,omitempty"`
	KeyID       string `json:"key_id,omitempty"`
	Outcome     string `json:"outcome"`
}

// retryVerifyAfter is the Retry-After of a report that could not be
// verified for now (503): the least time before GitHub's keys are loaded
// again.
const retryVerifyAfter = githubRefetchEvery

// errScanner is why a report was not accepted; its text is the answer.
type errScanner struct {
	status int
	msg    string
}

func (e *errScanner) Error() string { return e.msg }

// verifyReport checks a report's scanner, timestamp and signature.
func (s *Service) verifyReport(h http.Header, body []byte) (Scanner, error) {
	id := h.Get("Portico-Scanner-Id")
	var sc *Scanner
	for i := range s.opts.Scanners {
		if s.opts.Scanners[i].ID == id {
			sc = &s.opts.Scanners[i]
		}
	}
	if sc == nil {
		if id == "" && h.Get("Github-Public-Key-Signature") != "" {
			return Scanner{}, &errScanner{http.StatusUnauthorized, "a report signed by GitHub goes to " + GitHubLeakPath}
		}
		return Scanner{}, &errScanner{http.StatusUnauthorized, "unknown scanner: set Portico-Scanner-Id to a configured scanner"}
	}
	tsText := h.Get("Portico-Scanner-Timestamp")
	sec, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return Scanner{}, &errScanner{http.StatusUnauthorized, "Portico-Scanner-Timestamp must be Unix seconds"}
	}
	if d := s.now().Sub(time.Unix(sec, 0)); d > ReplayWindow || d < -ReplayWindow {
		return Scanner{}, &errScanner{http.StatusUnauthorized, "the report's timestamp is more than 5 minutes from the service's clock (a replay, or a wrong clock)"}
	}
	sig, err := base64.StdEncoding.DecodeString(h.Get("Portico-Scanner-Signature"))
	if err != nil || len(sig) == 0 {
		return Scanner{}, &errScanner{http.StatusUnauthorized, "Portico-Scanner-Signature must be a base64 ECDSA signature"}
	}
	digest := signedDigest(tsText, body)
	if !ecdsa.VerifyASN1(sc.Key, digest[:], sig) {
		return Scanner{}, &errScanner{http.StatusUnauthorized, "the report's signature does not verify"}
	}
	return *sc, nil
}

// signedDigest is what a scanner signs: SHA-256(timestamp + "." + body).
func signedDigest(timestamp string, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// SignReport returns the headers a scanner sends with body: for scanners'
// client code and tests.
func SignReport(scannerID string, key *ecdsa.PrivateKey, at time.Time, body []byte) (http.Header, error) {
	ts := strconv.FormatInt(at.Unix(), 10)
	d := signedDigest(ts, body)
	sig, err := ecdsa.SignASN1(rand.Reader, key, d[:])
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Portico-Scanner-Id", scannerID)
	h.Set("Portico-Scanner-Timestamp", ts)
	h.Set("Portico-Scanner-Signature", base64.StdEncoding.EncodeToString(sig))
	h.Set("Content-Type", "application/json")
	return h, nil
}

func (s *Service) serveLeakReport(w http.ResponseWriter, r *http.Request) {
	verify := func(r *http.Request, body []byte) (string, error) {
		sc, err := s.verifyReport(r.Header, body)
		if err != nil {
			return r.Header.Get("Portico-Scanner-Id"), err
		}
		return sc.ID, nil
	}
	answer := func(reports []leakReport, rows []store.LeakReport) any {
		answers := make([]leakAnswer, len(reports))
		for i, row := range rows {
			answers[i] = leakAnswer{TokenPrefix: apikey.DisplayPrefix(reports[i].Token), KeyID: row.KeyID, Outcome: row.Outcome}
		}
		return answers
	}
	s.serveReport(w, r, verify, answer)
}

// serveReport serves a scanner's endpoint, whatever its scheme: it reads
// the body, has verify check it, records the reported keys and answers
// with what answer makes of them (JSON). verify returns who sent the
// report, or why it is refused (an *errScanner) and who it claimed to
// be, for the log; a report it refuses changes nothing.
func (s *Service) serveReport(w http.ResponseWriter, r *http.Request,
	verify func(r *http.Request, body []byte) (string, error),
	answer func(reports []leakReport, rows []store.LeakReport) any,
) {
	body, ok := readLeakBody(w, r)
	if !ok {
		return
	}
	reporter, err := verify(r, body)
	if err != nil {
		var es *errScanner
		errors.As(err, &es)
		s.log.Warn("leaked-key report refused", "scanner", reporter, "remote", r.RemoteAddr, "why", es.msg)
		if es.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryVerifyAfter.Seconds())))
		}
		writeJSONError(w, es.status, es.msg)
		return
	}
	reports, err := parseLeaks(body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	rows, err := s.recordLeaks(r.Context(), reporter, reports)
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, "the report could not be recorded; send it again")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer(reports, rows))
}

// readLeakBody reads a scanner's report: a POST of at most maxLeakBody
// bytes. When it cannot, it has answered and reports false.
func readLeakBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeJSONError(w, http.StatusMethodNotAllowed, "POST a JSON array of reports")
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLeakBody+1))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "the body could not be read")
		return nil, false
	}
	if len(body) > maxLeakBody {
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a report is at most %d bytes", maxLeakBody))
		return nil, false
	}
	return body, true
}

// parseLeaks decodes a verified body: a JSON array of 1 to
// maxLeakReports reported keys. Its error is the answer's text.
func parseLeaks(body []byte) ([]leakReport, error) {
	var reports []leakReport
	if err := json.Unmarshal(body, &reports); err != nil {
		return nil, errors.New("the body must be a JSON array of {token, type, url, source}")
	}
	if len(reports) == 0 || len(reports) > maxLeakReports {
		return nil, fmt.Errorf("a report holds 1 to %d keys", maxLeakReports)
	}
	return reports, nil
}

// recordLeaks revokes the reported keys that are active, records every
// reported key with reporter, its URL and source, and publishes the
// revocations. It returns what became of each key, in the order of
// reports. It logs no key, and no key's hash.
func (s *Service) recordLeaks(ctx context.Context, reporter string, reports []leakReport) ([]store.LeakReport, error) {
	// One report may name keys found at several URLs; they are recorded
	// one URL at a time, each in its own transaction.
	rows := make([]store.LeakReport, len(reports))
	byURL := map[[2]string][]int{}
	var order [][2]string
	for i, rep := range reports {
		k := [2]string{rep.URL, rep.Source}
		if _, ok := byURL[k]; !ok {
			order = append(order, k)
		}
		byURL[k] = append(byURL[k], i)
	}
	for _, k := range order {
		idx := byURL[k]
		hashes := make([][32]byte, len(idx))
		for j, i := range idx {
			hashes[j] = apikey.Hash(reports[i].Token)
		}
		got, err := s.store.ReportLeaked(ctx, hashes, store.LeakReport{
			At: s.now(), Reporter: reporter, URL: k[0], Source: k[1], Reason: "leaked: found at " + k[0],
		})
		if err != nil {
			s.log.Error("recording a leaked-key report failed", "scanner", reporter, "err", err)
			return nil, err
		}
		for j, i := range idx {
			rows[i] = got[j]
			if got[j].Outcome == store.OutcomeRevoked {
				s.log.Warn("leaked key revoked", "key", got[j].KeyID, "scanner", reporter, "url", k[0])
			}
		}
	}
	s.publishNow(ctx)
	return rows, nil
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
