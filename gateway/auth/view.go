package auth

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	"github.com/portico-gw/portico/gateway/auth/keytable"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// View is the credentials one request authenticates against: the
// snapshot's API key table, the fast lane's, and the token issuers (the
// snapshot's, with the keys the lane published for them merged in) with
// both deny lists. A View is immutable. A node holds one in each state it
// publishes, so that a request, which loads one state, sees the keys,
// issuers, plans and routes of one version.
type View struct {
	keys, lane *keytable.Table
	tokens     *jwt.Issuers
}

// Sources builds Views from the two sources that change them: each
// snapshot (its key table, issuers and deny list) and the fast lane (its
// key table, deny entries and the issuers' published keys). It is not
// safe for concurrent use: its owner serialises the calls.
//
// Lifecycle: NewSources. For each snapshot, Snapshot, and the returned
// Change committed once its View is published (or aborted, when the
// snapshot is refused for another reason); for each fast-lane change,
// LaneKeys or LaneTokens, and Commit. A Change must be committed or
// aborted before the next one is made.
type Sources struct {
	tokens *jwt.Verifier
	log    *slog.Logger

	view        *View
	snapIssuers []*configv1.Issuer
	snapDeny    []*configv1.DenyEntry
	laneDeny    []*configv1.DenyEntry
	laneJWKS    map[string]string
	merged      []*configv1.Issuer // snapIssuers with laneJWKS
}

// NewSources returns Sources whose View has no keys and no issuers.
// tokens builds the issuer sets; log gets the lane's keys left out of a
// snapshot they no longer fit.
func NewSources(tokens *jwt.Verifier, log *slog.Logger) *Sources {
	if log == nil {
		log = slog.Default()
	}
	return &Sources{tokens: tokens, log: log, view: &View{}}
}

// View is the last committed View.
func (s *Sources) View() *View { return s.view }

// Change is a View made from one more change of a source, to publish and
// then commit, or to abort.
type Change struct {
	// View is the View with the change.
	View   *View
	commit func()
	abort  func()
}

// Commit makes the change the base of the next one, once View is
// published.
func (c *Change) Commit() { c.commit() }

// Abort drops the change: View must not be, or stay, published.
func (c *Change) Abort() { c.abort() }

// Snapshot makes the View of a new snapshot's key table, issuers and deny
// list, with the fast lane's. The lane's published keys that no longer
// fit their issuer as the snapshot configures it (an algorithm it no
// longer allows) are left out and logged, so that they never make the
// node refuse a snapshot. On error nothing changes.
func (s *Sources) Snapshot(keys *keytable.Table, issuers []*configv1.Issuer, deny []*configv1.DenyEntry) (*Change, error) {
	merged, err := s.mergeIssuers(issuers, s.laneJWKS, true)
	if err != nil {
		return nil, err
	}
	set, err := s.tokens.Prepare(merged, joinDeny(deny, s.laneDeny))
	if err != nil {
		return nil, err
	}
	v := &View{keys: keys, lane: s.view.lane, tokens: set}
	return &Change{View: v,
		commit: func() {
			s.tokens.Install(set)
			s.view, s.snapIssuers, s.snapDeny, s.merged = v, issuers, deny, merged
		},
		abort: func() { s.tokens.Discard(set) },
	}, nil
}

// LaneKeys makes the View with the fast lane's new key table.
func (s *Sources) LaneKeys(lane *keytable.Table) *Change {
	v := &View{keys: s.view.keys, lane: lane, tokens: s.view.tokens}
	return &Change{View: v, commit: func() { s.view = v }, abort: func() {}}
}

// LaneTokens makes the View with the fast lane's deny entries and
// issuers' published keys. The issuers are merged again only when the
// published keys changed: a revocation changes the deny list alone. A
// published key set that does not fit its issuer is an error the lane
// reports.
func (s *Sources) LaneTokens(deny []*configv1.DenyEntry, jwks map[string]string) (*Change, error) {
	merged := s.merged
	if !maps.Equal(jwks, s.laneJWKS) {
		var err error
		if merged, err = s.mergeIssuers(s.snapIssuers, jwks, false); err != nil {
			return nil, err
		}
	}
	set, err := s.tokens.Prepare(merged, joinDeny(s.snapDeny, deny))
	if err != nil {
		return nil, err
	}
	v := &View{keys: s.view.keys, lane: s.view.lane, tokens: set}
	return &Change{View: v,
		commit: func() {
			s.tokens.Install(set)
			s.view, s.laneDeny, s.laneJWKS, s.merged = v, deny, jwks, merged
		},
		abort: func() { s.tokens.Discard(set) },
	}, nil
}

// joinDeny is the snapshot's deny list and the fast lane's.
func joinDeny(snap, lane []*configv1.DenyEntry) []*configv1.DenyEntry {
	if len(lane) == 0 {
		return snap
	}
	return append(slices.Clip(snap), lane...)
}

// mergeIssuers adds the fast lane's published key sets to their issuers'
// jwks_json. With lenient (a new snapshot), published keys that do not fit
// their issuer as the snapshot configures it are left out and logged;
// without (a fast-lane change), they are an error.
func (s *Sources) mergeIssuers(issuers []*configv1.Issuer, laneJWKS map[string]string, lenient bool) ([]*configv1.Issuer, error) {
	if len(laneJWKS) == 0 {
		return issuers, nil
	}
	out := make([]*configv1.Issuer, len(issuers))
	for i, is := range issuers {
		out[i] = is
		published, ok := laneJWKS[is.GetName()]
		if !ok {
			continue
		}
		merged, err := jwt.MergeJWKS(is.GetJwksJson(), published)
		if err != nil && lenient {
			s.log.Warn("the fast lane's keys of an issuer do not merge with its new config; left out", "issuer", is.GetName(), "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("issuer %q: %w", is.GetName(), err)
		}
		c := proto.CloneOf(is)
		c.JwksJson = merged
		if lenient {
			if err := s.tokens.CheckIssuer(c); err != nil {
				s.log.Warn("the fast lane's keys of an issuer do not fit its new config; left out", "issuer", is.GetName(), "err", err)
				continue
			}
		}
		out[i] = c
	}
	return out, nil
}
