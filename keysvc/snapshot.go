package keysvc

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/keysnapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc/store"
)

// SnapshotPath serves the signed key snapshot.
const SnapshotPath = "/v1/key-snapshot"

// snapshotMaxAge is how long a built snapshot is served while the store's
// sequence has not moved: deny entries expire without a change, and a
// snapshot should not keep them long after.
const snapshotMaxAge = time.Minute

// snapshotter builds, signs and caches the snapshot.
type snapshotter struct {
	s   *Service
	key ed25519.PrivateKey

	mu    sync.Mutex // one build at a time
	seq   uint64
	built time.Time
	data  []byte
}

// current returns the signed snapshot of the store's state now, and its
// sequence.
func (sn *snapshotter) current(ctx context.Context) ([]byte, uint64, error) {
	seq, err := sn.s.store.Seq(ctx)
	if err != nil {
		return nil, 0, err
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	now := sn.s.now()
	if sn.data != nil && sn.seq == seq && now.Sub(sn.built) < snapshotMaxAge {
		return sn.data, sn.seq, nil
	}
	seq, keys, deny, issuers, err := sn.s.store.State(ctx, now)
	if err != nil {
		return nil, 0, err
	}
	snap := &configv1.KeySnapshot{Seq: seq, Generated: timestamppb.New(now),
		Entries: make([]*configv1.FastLaneEntry, 0, len(keys)+len(deny)+len(issuers))}
	for i := range keys {
		snap.Entries = append(snap.Entries, toEntry(store.Change{Rev: keys[i].Rev, Key: &keys[i]}))
	}
	for i := range deny {
		snap.Entries = append(snap.Entries, toEntry(store.Change{Rev: deny[i].Rev, Deny: &deny[i]}))
	}
	for i := range issuers {
		snap.Entries = append(snap.Entries, toEntry(store.Change{Rev: issuers[i].Rev, IssuerKeys: &issuers[i]}))
	}
	data, err := keysnapshot.Sign(sn.key, snap)
	if err != nil {
		return nil, 0, err
	}
	sn.seq, sn.built, sn.data = seq, now, data
	return data, seq, nil
}

// serveSnapshot answers GET /v1/key-snapshot with the signed snapshot
// (application/x-protobuf, a portico.config.v1.SignedKeySnapshot), or 304
// when the caller's If-None-Match names its sequence.
func (s *Service) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if s.snap == nil {
		http.Error(w, "this key service has no signing key: no snapshot is served", http.StatusNotFound)
		return
	}
	if want := s.opts.SnapshotTokenHash; want != "" {
		if token, ok := svcauth.Token(r.Header); !ok || !svcauth.Matches(token, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portico-keys"`)
			http.Error(w, "a node token is required", http.StatusUnauthorized)
			return
		}
	}
	data, seq, err := s.snap.current(r.Context())
	if err != nil {
		s.log.Error("building the key snapshot failed", "err", err)
		http.Error(w, "the key snapshot could not be built", http.StatusServiceUnavailable)
		return
	}
	etag := `"seq-` + strconv.FormatUint(seq, 10) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}
