package keysvc

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/keysvc/store"
)

// keyAPI serves portico.keys.v1.KeyService.
type keyAPI struct{ s *Service }

// ErrNotConfirmed is CreateKey's and RotateKey's error when the nodes did
// not all confirm the new key in time: the key is revoked, never shown
// (and a rotation undone, so that it can be tried again).
var ErrNotConfirmed = errors.New("keysvc: not every node has the key")

// neverShown is the revocation reason of a withdrawn key.
const neverShown = "never shown: not every node confirmed it"

// newKey generates a raw key and its record, without storing it.
func (s *Service) newKey(env keysv1.Environment) (string, store.Key, error) {
	e := apikey.Live
	if env == keysv1.Environment_ENVIRONMENT_TEST {
		e = apikey.Test
	}
	raw, err := apikey.Generate(e, s.opts.Rand)
	if err != nil {
		return "", store.Key{}, err
	}
	var id [10]byte
	if _, err := io.ReadFull(s.opts.Rand, id[:]); err != nil {
		return "", store.Key{}, err
	}
	return raw, store.Key{
		ID:      "key_" + hex.EncodeToString(id[:]),
		Hash:    apikey.Hash(raw),
		Prefix:  apikey.DisplayPrefix(raw),
		Env:     e.String(),
		Status:  store.StatusActive,
		Created: s.now().UTC(),
	}, nil
}

func (a *keyAPI) CreateKey(ctx context.Context, req *connect.Request[keysv1.CreateKeyRequest]) (*connect.Response[keysv1.CreateKeyResponse], error) {
	s, m := a.s, req.Msg
	raw, k, err := s.newKey(m.GetEnv())
	if err != nil {
		return nil, s.internal("generating a key failed", err)
	}
	k.AppID, k.TenantID, k.Plan, k.Scopes, k.Priority = m.GetAppId(), m.GetTenantId(), m.GetPlan(), m.GetScopes(), int32(m.GetPriority())
	if m.GetNotAfter() != nil {
		k.NotAfter = m.GetNotAfter().AsTime()
	}
	k, err = s.store.CreateKey(ctx, k)
	if err != nil {
		return nil, s.internal("storing the key failed", err)
	}
	s.log.Info("key created", "key", k.ID, "app", k.AppID, "by", callerOf(ctx).Name, "rev", k.Rev)
	withdraw := func(ctx context.Context) error {
		_, _, err := s.store.RevokeKey(ctx, k.ID, neverShown, "keysvc", s.now())
		return err
	}
	if err := s.confirm(ctx, k, waitTimeout(m.GetWaitTimeout(), s.opts.WaitTimeout), withdraw); err != nil {
		return nil, err
	}
	return connect.NewResponse(&keysv1.CreateKeyResponse{Key: toAPI(k), RawKey: raw}), nil
}

func (a *keyAPI) RotateKey(ctx context.Context, req *connect.Request[keysv1.RotateKeyRequest]) (*connect.Response[keysv1.RotateKeyResponse], error) {
	s, m := a.s, req.Msg
	old, err := s.store.GetKey(ctx, m.GetKeyId())
	if err != nil {
		return nil, s.storeError(err, "key "+m.GetKeyId())
	}
	raw, k, err := s.newKey(envOf(old.Env))
	if err != nil {
		return nil, s.internal("generating a key failed", err)
	}
	k.AppID, k.TenantID, k.Plan, k.Scopes, k.Priority, k.NotAfter = old.AppID, old.TenantID, old.Plan, old.Scopes, old.Priority, old.NotAfter
	overlap := s.opts.Overlap
	if d := m.GetOverlap(); d != nil {
		overlap = d.AsDuration()
	}
	next, prev, err := s.store.RotateKey(ctx, old.ID, k, s.now().Add(overlap))
	if err != nil {
		return nil, s.storeError(err, "key "+m.GetKeyId())
	}
	s.log.Info("key rotated", "key", prev.ID, "successor", next.ID, "old_key_ends", prev.NotAfter, "by", callerOf(ctx).Name)
	withdraw := func(ctx context.Context) error {
		_, err := s.store.WithdrawRotation(ctx, old.ID, next.ID, old.NotAfter, neverShown, "keysvc", s.now())
		return err
	}
	if err := s.confirm(ctx, next, waitTimeout(m.GetWaitTimeout(), s.opts.WaitTimeout), withdraw); err != nil {
		return nil, err
	}
	return connect.NewResponse(&keysv1.RotateKeyResponse{Key: toAPI(next), RawKey: raw, Previous: toAPI(prev)}), nil
}

// confirm publishes a new key and waits until every connected node has
// it. When that fails the key is withdrawn (revoked; for a rotation, the
// rotation undone), so that a key nobody was shown does not stay valid,
// and the error says which nodes lack it.
func (s *Service) confirm(ctx context.Context, k store.Key, timeout time.Duration, withdraw func(context.Context) error) error {
	if !s.pub.Enabled() {
		return nil // no fast lane: nodes learn keys from the signed snapshot
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	version, err := s.pub.Sync(ctx)
	published := err == nil
	var resp *distributionv1.WaitResponse
	if published {
		resp, err = s.waitNodes(ctx, version)
		if err == nil && resp.GetComplete() {
			return nil
		}
	}
	if rerr := withdraw(context.WithoutCancel(ctx)); rerr != nil {
		s.log.Error("withdrawing an unconfirmed key failed", "key", k.ID, "err", rerr)
	}
	s.pub.Kick()
	if err != nil {
		s.log.Warn("a new key could not be published", "key", k.ID, "taken_by_the_control_plane", published, "err", err)
		if late(ctx, err) {
			// The control plane was reached, or may have been, and did
			// not answer in time: a timeout, not an outage.
			what := "did not take the key"
			if published {
				what = "did not say which nodes have the key"
			}
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("%w: the control plane %s within the %s wait; the key was withdrawn, try again", ErrNotConfirmed, what, timeout))
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: the control plane could not be reached; the key was withdrawn, try again", ErrNotConfirmed))
	}
	if resp.GetComplete() {
		// Every node had it by the time we asked again: it was shown to
		// nobody and is withdrawn all the same, as the caller's wait ran
		// out; say so.
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("%w: the nodes acknowledged the key only after the %s wait; the key was withdrawn, try again", ErrNotConfirmed, timeout))
	}
	var behind []string
	for _, n := range lagging(resp) {
		b := fmt.Sprintf("%s (at version %d", n.GetNodeId(), n.GetVersion())
		if n.GetError() != "" {
			b += ", refused: " + n.GetError()
		}
		behind = append(behind, b+")")
	}
	return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("%w: %d of %d nodes had not acknowledged fast-lane version %d after %s: %s; the key was withdrawn, try again",
		ErrNotConfirmed, len(behind), resp.GetNodes(), version, timeout, strings.Join(behind, ", ")))
}

// waitNodes waits, until ctx's deadline, for every node connected to the
// fast lane to have version. The control plane answers at the timeout it
// is given with the nodes that lack it: it is asked to answer a little
// before ctx's deadline. When its answer comes late all the same (a loaded
// control plane, a slow network), it is asked once more, at once, so that
// the answer is the timeout it is and names the nodes.
func (s *Service) waitNodes(ctx context.Context, version uint64) (*distributionv1.WaitResponse, error) {
	deadline, _ := ctx.Deadline()
	left := time.Until(deadline)
	resp, err := s.pub.Wait(ctx, version, left-min(left/10, 100*time.Millisecond))
	if err != nil && late(ctx, err) {
		qctx, qcancel := context.WithTimeout(context.WithoutCancel(ctx), reaskTimeout)
		defer qcancel()
		resp, err = s.pub.Wait(qctx, version, time.Millisecond)
	}
	return resp, err
}

// reaskTimeout bounds waitNodes' second question, past the caller's
// deadline: a control plane that does not answer a question it can
// answer at once is not waited for long.
const reaskTimeout = time.Second

// late reports whether err ends a wait that ran out: ctx's deadline
// passed (its timer may not have fired yet when the answer was given up
// on), or the control plane saw the deadline it was sent pass first (its
// clock and ours read the same moment differently under load).
func late(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded
}

// lagging is the nodes a Wait answer names as lacking the version.
func lagging(resp *distributionv1.WaitResponse) []*keysv1.LaggingNode {
	var out []*keysv1.LaggingNode
	for _, n := range resp.GetBehind() {
		out = append(out, &keysv1.LaggingNode{NodeId: n.GetNodeId(), Version: n.GetVersion(), Error: n.GetError()})
	}
	return out
}

// propagation waits up to wait (unset: not at all, nil) for every node
// connected to the fast lane to have version, and says which did. The
// change is committed whatever it finds.
func (s *Service) propagation(ctx context.Context, version uint64, wait *durationpb.Duration) *keysv1.Propagation {
	switch {
	case wait == nil:
		return nil
	case !s.pub.Enabled():
		return &keysv1.Propagation{State: keysv1.Propagation_STATE_NO_FAST_LANE}
	case version == 0:
		return &keysv1.Propagation{State: keysv1.Propagation_STATE_UNREACHED}
	}
	ctx, cancel := context.WithTimeout(ctx, wait.AsDuration())
	defer cancel()
	resp, err := s.waitNodes(ctx, version)
	if err != nil {
		s.log.Warn("asking the control plane which nodes have a change failed", "version", version, "err", err)
		return &keysv1.Propagation{State: keysv1.Propagation_STATE_UNREACHED}
	}
	p := &keysv1.Propagation{State: keysv1.Propagation_STATE_INCOMPLETE, Nodes: resp.GetNodes(), Behind: lagging(resp)}
	if resp.GetComplete() {
		p.State = keysv1.Propagation_STATE_COMPLETE
	}
	return p
}

func waitTimeout(d *durationpb.Duration, def time.Duration) time.Duration {
	if d.IsValid() && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return def
}

func (a *keyAPI) RevokeKey(ctx context.Context, req *connect.Request[keysv1.RevokeKeyRequest]) (*connect.Response[keysv1.RevokeKeyResponse], error) {
	s := a.s
	k, changed, err := s.store.RevokeKey(ctx, req.Msg.GetKeyId(), req.Msg.GetReason(), callerOf(ctx).Name, s.now())
	if err != nil {
		return nil, s.storeError(err, "key "+req.Msg.GetKeyId())
	}
	if changed {
		s.log.Info("key revoked", "key", k.ID, "by", callerOf(ctx).Name, "reason", req.Msg.GetReason(), "rev", k.Rev)
	}
	v := s.publishNow(ctx)
	return connect.NewResponse(&keysv1.RevokeKeyResponse{Key: toAPI(k), Version: v, Propagation: s.propagation(ctx, v, req.Msg.GetWaitForNodes())}), nil
}

func (a *keyAPI) RevokeApp(ctx context.Context, req *connect.Request[keysv1.RevokeAppRequest]) (*connect.Response[keysv1.RevokeAppResponse], error) {
	s := a.s
	keys, err := s.store.RevokeApp(ctx, req.Msg.GetAppId(), req.Msg.GetReason(), callerOf(ctx).Name, s.now())
	if err != nil {
		return nil, s.storeError(err, "app "+req.Msg.GetAppId())
	}
	s.log.Info("app revoked", "app", req.Msg.GetAppId(), "keys", len(keys), "by", callerOf(ctx).Name, "reason", req.Msg.GetReason())
	v := s.publishNow(ctx)
	resp := &keysv1.RevokeAppResponse{Version: v, Propagation: s.propagation(ctx, v, req.Msg.GetWaitForNodes())}
	for _, k := range keys {
		resp.Keys = append(resp.Keys, toAPI(k))
	}
	return connect.NewResponse(resp), nil
}

// publishNow publishes what the control plane lacks and returns the
// fast-lane version that holds it; 0 when it cannot within WaitTimeout
// (the change is committed: it reaches nodes through the signed snapshot,
// and through the lane once the publisher gets through).
func (s *Service) publishNow(ctx context.Context) uint64 {
	if !s.pub.Enabled() {
		return 0
	}
	// The change is committed: a control plane that does not answer must
	// not hold up the answer.
	ctx, cancel := context.WithTimeout(ctx, s.opts.WaitTimeout)
	defer cancel()
	v, err := s.pub.Sync(ctx)
	if err != nil {
		s.log.Warn("publishing to the fast lane failed; retrying in the background", "err", err)
		s.pub.Kick()
		return 0
	}
	return v
}

func (a *keyAPI) GetKey(ctx context.Context, req *connect.Request[keysv1.GetKeyRequest]) (*connect.Response[keysv1.GetKeyResponse], error) {
	k, err := a.s.store.GetKey(ctx, req.Msg.GetKeyId())
	if err != nil {
		return nil, a.s.storeError(err, "key "+req.Msg.GetKeyId())
	}
	return connect.NewResponse(&keysv1.GetKeyResponse{Key: toAPI(k)}), nil
}

func (a *keyAPI) ListKeys(ctx context.Context, req *connect.Request[keysv1.ListKeysRequest]) (*connect.Response[keysv1.ListKeysResponse], error) {
	m := req.Msg
	limit := int(m.GetPageSize())
	if limit == 0 {
		limit = 100
	}
	f := store.ListFilter{AppID: m.GetAppId(), TenantID: m.GetTenantId(), After: m.GetPageToken(), Limit: limit}
	keys, err := a.s.store.ListKeys(ctx, f)
	if err != nil {
		return nil, a.s.internal("listing keys failed", err)
	}
	resp := &keysv1.ListKeysResponse{}
	if len(keys) == limit {
		// A full page: is there more? (Asking for limit+1 keys instead
		// fails at the largest page, as the store returns at most 1000.)
		f.After, f.Limit = keys[limit-1].ID, 1
		more, err := a.s.store.ListKeys(ctx, f)
		if err != nil {
			return nil, a.s.internal("listing keys failed", err)
		}
		if len(more) > 0 {
			resp.NextPageToken = keys[limit-1].ID
		}
	}
	for _, k := range keys {
		resp.Keys = append(resp.Keys, toAPI(k))
	}
	return connect.NewResponse(resp), nil
}

// storeError maps the store's errors to the API's.
func (s *Service) storeError(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found", what))
	case errors.Is(err, store.ErrConflict):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: %v", what, err))
	}
	return s.internal("the key store failed", err)
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// envOf is the API's name of a stored environment ("live", "test": what
// apikey.Env.String says).
func envOf(env string) keysv1.Environment {
	if env == apikey.Test.String() {
		return keysv1.Environment_ENVIRONMENT_TEST
	}
	return keysv1.Environment_ENVIRONMENT_LIVE
}

// toAPI is a key's metadata: never the hash.
func toAPI(k store.Key) *keysv1.Key {
	return &keysv1.Key{
		KeyId: k.ID, Prefix: k.Prefix, AppId: k.AppID, TenantId: k.TenantID, Plan: k.Plan, Scopes: k.Scopes, Env: envOf(k.Env),
		Priority: configv1.Priority(k.Priority), Status: configv1.KeyStatus(k.Status), Created: ts(k.Created), NotAfter: ts(k.NotAfter),
		SuccessorKeyId: k.Successor, PredecessorKeyId: k.Predecessor, Revoked: ts(k.Revoked), RevokeReason: k.RevokeReason,
		RevokedBy: k.RevokedBy, Rev: k.Rev,
	}
}

// toRecord is a key as the nodes hold it.
func toRecord(k *store.Key) *configv1.KeyRecord {
	return &configv1.KeyRecord{
		Sha256: k.Hash[:], KeyId: k.ID, AppId: k.AppID, TenantId: k.TenantID, Plan: k.Plan, Scopes: k.Scopes,
		Priority: configv1.Priority(k.Priority), Status: configv1.KeyStatus(k.Status), NotAfter: ts(k.NotAfter),
		SuccessorKeyId: k.Successor,
	}
}

// toEntry is a store change as a fast-lane entry.
func toEntry(c store.Change) *configv1.FastLaneEntry {
	e := &configv1.FastLaneEntry{Rev: c.Rev}
	switch {
	case c.Key != nil:
		e.Entry = &configv1.FastLaneEntry_Key{Key: toRecord(c.Key)}
	case c.Deny != nil:
		e.Entry = &configv1.FastLaneEntry_Deny{Deny: c.Deny.Entry}
	case c.IssuerKeys != nil:
		e.Entry = &configv1.FastLaneEntry_IssuerKeys{IssuerKeys: &configv1.IssuerKeys{Issuer: c.IssuerKeys.Issuer, JwksJson: c.IssuerKeys.JWKS}}
	}
	return e
}
