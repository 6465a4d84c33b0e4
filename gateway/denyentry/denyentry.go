// Package denyentry is how long a token deny entry must last: the one
// rule the key service, the control plane and the nodes share, so that
// none of them lets an entry go while a token it covers could still be
// accepted somewhere. It does no I/O.
//
// An entry's own expires is what its caller asked for and is only ever
// raised. A node knows its issuers' max_token_lifetime and leeway and
// computes the entry's Lapse from them; everything that holds entries
// without knowing the issuers (the key service's store and signed
// snapshot, the control plane's fast lane, a node's fast-lane state) keeps
// an entry until KeepUntil, which is Lapse for the longest lifetime and
// leeway config.proto allows. So a node that joins late, or whose issuer's
// lifetime is raised after the entry was made, still gets the entry.
package denyentry

import (
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Bounds config.proto sets on an Issuer (TestBounds keeps them equal).
const (
	// MaxLifetime is the longest max_token_lifetime an issuer may have.
	MaxLifetime = 24 * time.Hour
	// MaxLeeway is the most leeway an issuer may give exp.
	MaxLeeway = 5 * time.Minute
)

// Lapse is when e stops denying tokens of an issuer whose tokens live at
// most lifetime and whose exp is given leeway: the latest of e's expires,
// its issued_before plus lifetime, and its token_expires, plus leeway.
//
// Every token e covers is dead by then. A subject or client entry covers
// tokens issued before issued_before, and a token with iat lives at most
// lifetime; a jti entry's token was issued before its issued_before, or
// expires at token_expires. (A token without iat is accepted only while
// its exp is at most lifetime away, so it is covered for as long only if
// token_expires is given: see docs/operations.md.) Lapse is the zero time
// if e has no valid expires.
func Lapse(e *configv1.DenyEntry, lifetime, leeway time.Duration) time.Time {
	if !e.GetExpires().IsValid() {
		return time.Time{}
	}
	t := e.GetExpires().AsTime()
	if ib := e.GetIssuedBefore(); ib.IsValid() {
		t = later(t, ib.AsTime().Add(lifetime))
	}
	if te := e.GetTokenExpires(); te.IsValid() {
		t = later(t, te.AsTime())
	}
	return t.Add(leeway)
}

// KeepUntil is how long a holder that does not know the issuers' config
// keeps e: its Lapse for MaxLifetime and MaxLeeway, never before its Lapse
// for any issuer.
func KeepUntil(e *configv1.DenyEntry) time.Time { return Lapse(e, MaxLifetime, MaxLeeway) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
