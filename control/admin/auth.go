package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Roles, as the store spells them.
const (
	roleTeam     = "team-admin"
	rolePlatform = "platform-admin"
)

// tokenPrefix starts every admin token, so secret scanners can find a
// leaked one and people can tell it from an API key.
const tokenPrefix = "ptk_"

// caller is an authenticated admin caller.
type caller struct {
	id   string // the token id: the audit log's actor
	team string // "" for platform admins
	role string
}

func (c caller) platform() bool { return c.role == rolePlatform }

// NewToken returns a new admin token and its id. The token is 32 random
// bytes; only its hash is ever stored.
func NewToken() (token, id string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	var idb [6]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), "tok_" + hex.EncodeToString(idb[:]), nil
}

// Bootstrap makes token a platform-admin token (id "bootstrap-" and the
// start of its hash) if no token with its hash exists: how the first
// platform admin gets in. Control planes may start at once with the same
// token. A revoked bootstrap token is an error: give a new one.
func Bootstrap(ctx context.Context, st *store.Store, token string) error {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) < len(tokenPrefix)+32 {
		return errors.New("admin: a bootstrap token is " + tokenPrefix + " and at least 32 characters")
	}
	hash := svcauth.Hash(token)
	existing := func() (bool, error) {
		t, err := st.TokenByHash(ctx, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return false, nil
		case err != nil:
			return false, err
		case !t.RevokedAt.IsZero():
			return true, errors.New("admin: the bootstrap token is revoked; give another")
		}
		return true, nil
	}
	if ok, err := existing(); ok || err != nil {
		return err
	}
	// Each bootstrap token has its own id, so a revoked one can be
	// replaced by another.
	err := st.PutToken(ctx, store.Token{ID: "bootstrap-" + hash[:12], Hash: hash, Role: rolePlatform, CreatedBy: "bootstrap", Note: "bootstrap token"})
	if errors.Is(err, store.ErrDuplicate) {
		// Another control plane starting at once stored it first.
		_, err = existing()
	}
	return err
}

// authenticate finds the caller of a request from its bearer token.
func (s *Service) authenticate(ctx context.Context, h http.Header) (caller, error) {
	token, ok := svcauth.Token(h)
	if !ok || !strings.HasPrefix(token, tokenPrefix) {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("an admin token is required (Authorization: Bearer "+tokenPrefix+"…)"))
	}
	t, err := s.store.TokenByHash(ctx, svcauth.Hash(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown admin token"))
	case err != nil:
		return caller{}, s.storeFailed(ctx, "authenticating", err)
	case !t.RevokedAt.IsZero():
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("the admin token is revoked"))
	}
	return caller{id: t.ID, team: t.Team, role: t.Role}, nil
}

// authorize authenticates the caller of an action on team's objects
// (team "" for the platform's) and checks it may act: a team admin on its
// own team's objects, a platform admin on any. write says whether the
// action changes anything. A refusal is audited.
func (s *Service) authorize(ctx context.Context, h http.Header, team, action, object string) (caller, error) {
	c, err := s.authenticate(ctx, h)
	if err != nil {
		return caller{}, err
	}
	if c.platform() || (team != "" && c.team == team) {
		return c, nil
	}
	detail := "a team-admin token of team " + c.team + " may act on that team's objects only"
	if team == "" {
		detail = "platform objects need a platform-admin token"
	}
	s.audit(ctx, &store.AuditEntry{Actor: c.id, Team: team, Action: action, Object: object, Outcome: "permission_denied", Detail: detail})
	return caller{}, connect.NewError(connect.CodePermissionDenied, errors.New(detail))
}

// audit records an entry, logging (not failing the call) if it cannot.
func (s *Service) audit(ctx context.Context, e *store.AuditEntry) {
	if err := s.store.AppendAudit(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "audit log write failed", "action", e.Action, "actor", e.Actor, "err", err)
	}
}
