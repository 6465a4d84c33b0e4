package upstream

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// certCheckInterval is how often, at most, an identity's files are
// stat'ed for a rotation. Handshakes in between use the pair in memory.
const certCheckInterval = 5 * time.Second

// IdentityFiles names one client certificate of the node: the PEM files of
// the certificate (chain) and of its private key.
type IdentityFiles struct {
	Name     string
	CertFile string
	KeyFile  string
}

// ParseIdentityFlag parses "NAME=CERT_FILE,KEY_FILE", the form of the
// gateway's -upstream-identity flag.
func ParseIdentityFlag(s string) (IdentityFiles, error) {
	name, files, ok := strings.Cut(s, "=")
	cert, key, ok2 := strings.Cut(files, ",")
	if !ok || !ok2 || name == "" || cert == "" || key == "" {
		return IdentityFiles{}, fmt.Errorf("upstream identity %q: want NAME=CERT_FILE,KEY_FILE", s)
	}
	if !validIdentityName(name) {
		return IdentityFiles{}, fmt.Errorf("upstream identity %q: the name is lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128", name)
	}
	return IdentityFiles{Name: name, CertFile: cert, KeyFile: key}, nil
}

// validIdentityName is the rule of the config's tls.identity field.
func validIdentityName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Identities are the client certificates a node holds for mTLS to its
// backends, by name. Snapshots name them (tls.identity), never their
// files, so a team's config cannot make the node present a certificate
// the platform did not give it, nor read any other file.
//
// One Identities serves the whole node: clusters that name the same
// identity share its loader, and a rotation of its files is picked up
// once for all of them. It is safe for concurrent use.
type Identities struct {
	byName map[string]*identity
}

// IdentityInfo describes a loaded identity's certificate (never its key):
// what a node reports to the control plane.
type IdentityInfo struct {
	Name     string
	Subject  string
	NotAfter time.Time
	// SHA256 is the hex SHA-256 of the leaf certificate's DER.
	SHA256 string
}

// LoadIdentities reads every identity's files. It fails, naming the
// identity and the file, if one does not load or a name repeats: a node
// must not start with an identity it would then lack. now (nil:
// time.Now) paces rotation checks; log receives reloads.
func LoadIdentities(files []IdentityFiles, now func() time.Time, log *slog.Logger) (*Identities, error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	ids := &Identities{byName: make(map[string]*identity, len(files))}
	for _, f := range files {
		if !validIdentityName(f.Name) {
			return nil, fmt.Errorf("upstream identity %q: invalid name", f.Name)
		}
		if ids.byName[f.Name] != nil {
			return nil, fmt.Errorf("upstream identity %q: given twice", f.Name)
		}
		id := &identity{name: f.Name, certFile: f.CertFile, keyFile: f.KeyFile, now: now, log: log.With("identity", f.Name)}
		if err := id.load(); err != nil {
			return nil, fmt.Errorf("upstream identity %q: %w", f.Name, err)
		}
		id.nextCheck = now().Add(certCheckInterval)
		ids.byName[f.Name] = id
	}
	return ids, nil
}

// Info describes every identity, sorted by name. A nil Identities has
// none.
func (ids *Identities) Info() []IdentityInfo {
	if ids == nil {
		return nil
	}
	out := make([]IdentityInfo, 0, len(ids.byName))
	for _, id := range ids.byName {
		out = append(out, id.info())
	}
	slices.SortFunc(out, func(a, b IdentityInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Has reports whether the node holds the identity name.
func (ids *Identities) Has(name string) bool { return ids.get(name) != nil }

func (ids *Identities) get(name string) *identity {
	if ids == nil {
		return nil
	}
	return ids.byName[name]
}

// MissingIdentityError is a cluster naming an identity the node does not
// hold.
type MissingIdentityError struct {
	Identity string
}

func (e *MissingIdentityError) Error() string {
	return fmt.Sprintf("tls.identity: this node has no upstream identity %q (portico gateway -upstream-identity %s=CERT,KEY)", e.Identity, e.Identity)
}

// identity serves one client certificate and picks up rotated files. It
// is called by crypto/tls during handshakes, from any number of
// goroutines.
type identity struct {
	name              string
	certFile, keyFile string
	now               func() time.Time
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certStamp fileStamp
	keyStamp  fileStamp
	nextCheck time.Time
}

// fileStamp identifies one version of a file without reading it.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(name string) (fileStamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// load reads the pair for the first time.
func (id *identity) load() error {
	cs, err := stampOf(id.certFile)
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	ks, err := stampOf(id.keyFile)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(id.certFile, id.keyFile)
	if err != nil {
		return fmt.Errorf("certificate and key: %w", err)
	}
	id.cert, id.certStamp, id.keyStamp = &cert, cs, ks
	return nil
}

func (id *identity) info() IdentityInfo {
	id.mu.Lock()
	cert := id.cert
	id.mu.Unlock()
	info := IdentityInfo{Name: id.name}
	if len(cert.Certificate) > 0 {
		sum := sha256.Sum256(cert.Certificate[0])
		info.SHA256 = hex.EncodeToString(sum[:])
	}
	if cert.Leaf != nil {
		info.Subject, info.NotAfter = cert.Leaf.Subject.String(), cert.Leaf.NotAfter
	}
	return info
}

// get is tls.Config.GetClientCertificate. It re-reads the files when their
// size or modification time changed, at most once per certCheckInterval. A
// new pair that does not load is logged and the old pair kept: a
// half-written rotation must not take the clusters down. The stamps of the
// bad files are remembered, so the next change (the other half being
// written) is retried.
func (id *identity) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	now := id.now()
	if now.Before(id.nextCheck) {
		return id.cert, nil
	}
	id.nextCheck = now.Add(certCheckInterval)
	cs, err1 := stampOf(id.certFile)
	ks, err2 := stampOf(id.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		id.log.Error("upstream identity files unreadable, keeping the loaded certificate", "error", err)
		return id.cert, nil
	}
	if cs == id.certStamp && ks == id.keyStamp {
		return id.cert, nil
	}
	id.certStamp, id.keyStamp = cs, ks
	cert, err := tls.LoadX509KeyPair(id.certFile, id.keyFile)
	if err != nil {
		id.log.Error("upstream identity changed but does not load, keeping the old certificate",
			"cert_file", id.certFile, "key_file", id.keyFile, "error", err)
		return id.cert, nil
	}
	id.cert = &cert
	attrs := []any{"cert_file", id.certFile}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	id.log.Info("upstream identity reloaded", attrs...)
	return id.cert, nil
}
