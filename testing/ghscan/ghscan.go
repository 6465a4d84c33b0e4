// Package ghscan plays GitHub's side of its secret scanning partner
// programme in tests: signing keys, the public keys document GitHub
// publishes at api.github.com/meta/public_keys/secret_scanning, a
// loopback server that serves it, and reports signed as GitHub signs
// them.
package ghscan

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Key is one of GitHub's signing keys.
type Key struct {
	// ID is its key_identifier.
	ID      string
	Private *ecdsa.PrivateKey
	// PEM is its public key as the document holds it.
	PEM string
}

// NewKey makes a P-256 key whose identifier is, as GitHub's are, the hex
// SHA-256 of its public key; id, if set, is used instead.
func NewKey(t testing.TB, id string) Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if id == "" {
		sum := sha256.Sum256(der)
		id = hex.EncodeToString(sum[:])
	}
	return Key{ID: id, Private: priv, PEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}
}

// Entry is one entry of the public keys document.
type Entry struct {
	KeyIdentifier string `json:"key_identifier"`
	Key           string `json:"key"`
	IsCurrent     bool   `json:"is_current"`
}

// Doc is the public keys document of entries.
func Doc(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	if entries == nil {
		entries = []Entry{}
	}
	b, err := json.Marshal(map[string][]Entry{"public_keys": entries})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DocOf is the public keys document listing keys, the first one current.
func DocOf(t testing.TB, keys ...Key) []byte {
	t.Helper()
	entries := make([]Entry, len(keys))
	for i, k := range keys {
		entries[i] = Entry{KeyIdentifier: k.ID, Key: k.PEM, IsCurrent: i == 0}
	}
	return Doc(t, entries...)
}

// Sign returns the headers GitHub sends with body, signed by k.
func (k Key) Sign(t testing.TB, body []byte) http.Header {
	t.Helper()
	sum := sha256.Sum256(body)
	sig, err := ecdsa.SignASN1(rand.Reader, k.Private, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Github-Public-Key-Identifier", k.ID)
	h.Set("Github-Public-Key-Signature", base64.StdEncoding.EncodeToString(sig))
	return h
}

// Server serves the public keys document on loopback and counts the
// fetches. It is safe for concurrent use.
type Server struct {
	// URL is the document's.
	URL     string
	fetches atomic.Int32

	mu     sync.Mutex
	status int
	doc    []byte
	hold   chan struct{}
}

// Start serves doc until the test ends.
func Start(t testing.TB, doc []byte) *Server {
	t.Helper()
	s := &Server{status: http.StatusOK, doc: doc}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		status, doc, hold := s.status, s.doc, s.hold
		s.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/meta/public_keys/secret_scanning"
	return s
}

// Serve makes the server answer status with doc from now on.
func (s *Server) Serve(status int, doc []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.doc, s.hold = status, doc, nil
}

// Hold makes every fetch wait, until the fetch gives up, Serve is
// called or the test ends.
func (s *Server) Hold(t testing.TB) {
	hold := make(chan struct{})
	s.mu.Lock()
	s.hold = hold
	s.mu.Unlock()
	// Registered after the server's Close, so it runs before it.
	t.Cleanup(func() { close(hold) })
}

// Fetches is how many times the document was asked for.
func (s *Server) Fetches() int32 { return s.fetches.Load() }
