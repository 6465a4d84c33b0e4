package keysvc

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/portico-gw/portico/keysvc/store"
)

// GitHubLeakPath is where GitHub's secret scanning partner programme
// posts the keys it found, as GitHub sends them: a JSON array of
// matches,
//
//	[{"token": "ak_live_…", "type": "portico_api_key", "url": "https://github.com/…", "source": "content"}]
//
// with two headers:
//
//	Github-Public-Key-Identifier: which of GitHub's public keys signed it
//	Github-Public-Key-Signature:  base64 of the ASN.1 ECDSA P-256 signature
//	                              of SHA-256(body)
//
// The key comes from GitHub's public keys document (GitHubOptions). A
// report whose signature does not verify, or whose identifier is not in
// the document even after loading it again, is refused (401); one that
// cannot be verified because the document cannot be loaded is answered
// 503, so that GitHub sends it again. Either way it changes nothing.
// Otherwise every match is hashed, a matching key revoked (revoked by
// "scanner:github") and the report recorded (reporter "github", URL,
// source), and the answer is GitHub's feedback, one element per match in
// the same order:
//
//	[{"token_hash": "<hex SHA-256 of the token>", "token_type": "portico_api_key", "label": "true_positive"}]
//
// where label is true_positive for one of the service's keys (active or
// already revoked) and false_positive for anything else. The answer never
// holds a token (no token_raw).
//
// GitHub's protocol has no timestamp: a recorded report can be sent
// again, and is answered again. That revokes nothing more, as a key is
// revoked once and revocation is never undone; it adds a record.
const GitHubLeakPath = "/v1/leaked-keys/github"

// GitHubReporter names GitHub in leak reports and revocations; no
// Portico-signed scanner may take this id, so that a record says which
// protocol brought it.
const GitHubReporter = "github"

// The labels of GitHub's feedback.
const (
	labelTruePositive  = "true_positive"
	labelFalsePositive = "false_positive"
)

// githubFeedback is the answer for one match.
type githubFeedback struct {
	TokenHash string `json:"token_hash"`
	TokenType string `json:"token_type"`
	Label     string `json:"label"`
}

// maxGitHubKeyID bounds the identifier header, which is logged.
const maxGitHubKeyID = 256

func (s *Service) serveGitHubReport(w http.ResponseWriter, r *http.Request) {
	if s.github == nil {
		writeJSONError(w, http.StatusNotFound, "this key service does not take GitHub's secret scanning reports (portico keys -github-secret-scanning, portico dev -github-keys-file)")
		return
	}
	verify := func(r *http.Request, body []byte) (string, error) {
		if err := s.verifyGitHub(r, body); err != nil {
			return GitHubReporter + " (key " + clip(r.Header.Get("Github-Public-Key-Identifier")) + ")", err
		}
		return GitHubReporter, nil
	}
	s.serveReport(w, r, verify, githubAnswer)
}

// githubAnswer is GitHub's feedback: one element per match.
func githubAnswer(reports []leakReport, rows []store.LeakReport) any {
	feedback := make([]githubFeedback, len(reports))
	for i, row := range rows {
		label := labelFalsePositive
		if row.Outcome == store.OutcomeRevoked || row.Outcome == store.OutcomeAlreadyRevoked {
			label = labelTruePositive
		}
		feedback[i] = githubFeedback{TokenHash: hex.EncodeToString(row.KeyHash[:]), TokenType: reports[i].Type, Label: label}
	}
	return feedback
}

// verifyGitHub checks a GitHub report's signature with the key its
// identifier names. Its error is an *errScanner: 401 for a report that
// is not GitHub's, 503 when GitHub's keys cannot be had now.
func (s *Service) verifyGitHub(r *http.Request, body []byte) error {
	id := r.Header.Get("Github-Public-Key-Identifier")
	if id == "" || len(id) > maxGitHubKeyID {
		return &errScanner{http.StatusUnauthorized, "Github-Public-Key-Identifier must name one of GitHub's secret scanning public keys"}
	}
	sig, err := base64.StdEncoding.DecodeString(r.Header.Get("Github-Public-Key-Signature"))
	if err != nil || len(sig) == 0 {
		return &errScanner{http.StatusUnauthorized, "Github-Public-Key-Signature must be a base64 ECDSA signature"}
	}
	keys, err := s.github.lookup(r.Context(), id)
	switch {
	case errors.Is(err, ErrGitHubKeyUnknown):
		return &errScanner{http.StatusUnauthorized, "Github-Public-Key-Identifier names none of GitHub's secret scanning public keys"}
	case err != nil:
		return &errScanner{http.StatusServiceUnavailable, "GitHub's secret scanning public keys could not be loaded, so the report cannot be verified; send it again later"}
	}
	digest := sha256.Sum256(body)
	for _, k := range keys {
		if ecdsa.VerifyASN1(k, digest[:], sig) {
			return nil
		}
	}
	return &errScanner{http.StatusUnauthorized, "the report's signature does not verify"}
}

// clip bounds a header value for the log.
func clip(s string) string {
	if len(s) > maxGitHubKeyID {
		return s[:maxGitHubKeyID] + "…"
	}
	return s
}
