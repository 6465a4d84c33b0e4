package jwt

import (
	"fmt"
	"time"

	"github.com/portico-gw/portico/gateway/denyentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

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
	// expires is when the rule stops counting, the entry's
	// denyentry.Lapse for its issuer's max_token_lifetime and leeway:
	// every token it covers has expired by then, whatever expires the
	// entry asked for.
	expires time.Time
}

func (r *denyRule) applies(issuer string, now time.Time) bool {
	return (r.issuer == "" || r.issuer == issuer) && now.Before(r.expires)
}

// newDenyList builds the list for the issuers by name, dropping entries
// that lapsed before now. An entry lasts as long as its issuer's tokens
// can (denyentry.Lapse): one for every issuer as long as the longest
// lifetime and leeway of them, one naming an issuer the node does not
// have as long as any issuer's could (it denies nothing until the issuer
// comes, and the list is built again then).
func newDenyList(entries []*configv1.DenyEntry, now time.Time, issuers map[string]*issuer) (*denyList, error) {
	d := &denyList{
		jti:     make(map[string][]denyRule),
		subject: make(map[string][]denyRule),
		client:  make(map[string][]denyRule),
	}
	var anyLife, anyLeeway time.Duration
	for _, is := range issuers {
		anyLife, anyLeeway = max(anyLife, is.maxLifetime), max(anyLeeway, is.leeway)
	}
	if len(issuers) == 0 {
		anyLife, anyLeeway = denyentry.MaxLifetime, denyentry.MaxLeeway
	}
	for i, e := range entries {
		if e == nil {
			return nil, fmt.Errorf("deny entry %d: nil", i)
		}
		if !e.GetExpires().IsValid() {
			return nil, fmt.Errorf("deny entry %d: expires is missing or invalid", i)
		}
		r := denyRule{issuer: e.GetIssuer()}
		switch is := issuers[r.issuer]; {
		case r.issuer == "":
			r.expires = denyentry.Lapse(e, anyLife, anyLeeway)
		case is != nil:
			r.expires = denyentry.Lapse(e, is.maxLifetime, is.leeway)
		default:
			r.expires = denyentry.KeepUntil(e)
		}
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
		// A jti entry names one token: its issued_before only bounds
		// how long it lasts.
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
