package jwt

import (
	"fmt"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// DenyGrace is how long a deny entry keeps denying after its expires: the
// most leeway an issuer may give exp (Issuer.leeway is at most 5 minutes),
// so that a token the entry covers cannot come back to life in the
// leeway after the entry lapses.
const DenyGrace = 5 * time.Minute

// denyList revokes verified tokens. It is immutable once built and looked
// up by map on every Verify, cache hits included, so revocation takes
// effect with the Update that carries it.
type denyList struct {
	jti     map[string][]denyRule
	subject map[string][]denyRule
	client  map[string][]denyRule
}

// denyRule is one entry, minus the value it is filed under.
type denyRule struct {
	// issuer is the configured name of the issuer it applies to; empty
	// means every issuer.
	issuer string
	// before is issued_before in Unix seconds; subject and client rules
	// deny tokens issued before it, and tokens without iat.
	before float64
	// expires is when the rule stops counting (the entry's expires plus
	// DenyGrace): every token it covers has
	// expired by then.
	expires time.Time
}

func (r *denyRule) applies(issuer string, now time.Time) bool {
	return (r.issuer == "" || r.issuer == issuer) && now.Before(r.expires)
}

// newDenyList builds the list, dropping entries that expired before now.
func newDenyList(entries []*configv1.DenyEntry, now time.Time) (*denyList, error) {
	d := &denyList{
		jti:     make(map[string][]denyRule),
		subject: make(map[string][]denyRule),
		client:  make(map[string][]denyRule),
	}
	for i, e := range entries {
		if e == nil {
			return nil, fmt.Errorf("deny entry %d: nil", i)
		}
		if !e.GetExpires().IsValid() {
			return nil, fmt.Errorf("deny entry %d: expires is missing or invalid", i)
		}
		r := denyRule{issuer: e.GetIssuer(), expires: e.GetExpires().AsTime().Add(DenyGrace)}
		if !now.Before(r.expires) {
			continue
		}
		var into map[string][]denyRule
		var value string
		switch m := e.GetMatch().(type) {
		case *configv1.DenyEntry_Jti:
			into, value = d.jti, m.Jti
		case *configv1.DenyEntry_Subject:
			into, value = d.subject, m.Subject
		case *configv1.DenyEntry_ClientId:
			into, value = d.client, m.ClientId
		default:
			return nil, fmt.Errorf("deny entry %d: no jti, subject or client_id", i)
		}
		if value == "" {
			return nil, fmt.Errorf("deny entry %d: empty match", i)
		}
		// issued_before means nothing to a jti entry, which names one
		// token.
		if e.GetJti() == "" {
			ib := e.GetIssuedBefore()
			if !ib.IsValid() {
				return nil, fmt.Errorf("deny entry %d: a subject or client_id entry needs issued_before", i)
			}
			r.before = float64(ib.GetSeconds()) + float64(ib.GetNanos())/1e9
		}
		into[value] = append(into[value], r)
	}
	if len(d.jti)+len(d.subject)+len(d.client) == 0 {
		return nil, nil
	}
	return d, nil
}

// denies reports whether the list revokes a verified token. A nil list
// revokes nothing.
func (d *denyList) denies(issuer string, c *Claims, iat float64, hasIat bool, now time.Time) bool {
	if d == nil {
		return false
	}
	if c.JTI != "" {
		rules := d.jti[c.JTI]
		for i := range rules {
			if rules[i].applies(issuer, now) {
				return true
			}
		}
	}
	return denyBefore(d.subject, c.Subject, issuer, iat, hasIat, now) ||
		denyBefore(d.client, c.ClientID, issuer, iat, hasIat, now)
}

func denyBefore(m map[string][]denyRule, value, issuer string, iat float64, hasIat bool, now time.Time) bool {
	if value == "" || len(m) == 0 {
		return false
	}
	rules := m[value]
	for i := range rules {
		// A token without iat cannot show it was issued after the cut:
		// fail closed.
		if rules[i].applies(issuer, now) && (!hasIat || iat < rules[i].before) {
			return true
		}
	}
	return false
}
