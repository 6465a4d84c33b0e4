package jwt_test

import (
	"crypto/rand"
	"crypto/rsa"
	"math/big"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == absent {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func TestUpdateRejectsBadKeySets(t *testing.T) {
	t.Parallel()
	ec := newSigner(t, "ES256", "ec").jwk()
	ec384 := newSigner(t, "ES384", "ec384").jwk()
	rs := newSigner(t, "RS256", "rs").jwk()
	ed := newSigner(t, "EdDSA", "ed").jwk()
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weakJWK := with(rs, "n", b64(weak.N.Bytes()))
	full := newSigner(t, "ES256", "full")
	private := with(full.jwk(), "d", "AAAA")
	// A point off the curve: y+1.
	y, _ := b64decode(ec["y"].(string))
	offCurve := with(ec, "y", b64(new(big.Int).Add(new(big.Int).SetBytes(y), big.NewInt(1)).FillBytes(make([]byte, 32))))

	all := algs(es256, es384, rs256, ps256, eddsa)
	for _, tt := range []struct {
		name string
		jwks string
		mods []func(*configv1.Issuer)
		want string // in the error
	}{
		{"RSA key under 2048 bits", jwks(weakJWK), []func(*configv1.Issuer){all}, "1024 bits"},
		{"private EC key", jwks(private), nil, `private key material (member "d")`},
		{"private RSA member", jwks(with(rs, "p", "AAAA")), []func(*configv1.Issuer){all}, "private key material"},
		{"symmetric key", jwks(map[string]any{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}), nil, "private key material"},
		{"point off the curve", jwks(offCurve), nil, "not on P-256"},
		{"short coordinate", jwks(with(ec, "x", b64(make([]byte, 31)))), nil, `"x" is 31 bytes, want 32`},
		{"duplicate kid", jwks(ec, with(ec384, "kid", "ec")), []func(*configv1.Issuer){all}, `duplicate kid "ec"`},
		{"duplicate member", `{"keys":[{"kty":"EC","kty":"RSA"}]}`, nil, "duplicate member"},
		{"no kid", jwks(with(ec, "kid", absent)), nil, "no kid"},
		{"kid a token could not name", jwks(with(ec, "kid", "a/b")), nil, "not a plain name"},
		{"alg that does not fit the key", jwks(with(ec, "alg", "RS256")), []func(*configv1.Issuer){all}, "does not fit"},
		{"alg the issuer does not allow", jwks(rs), nil, "fits none of the issuer's algorithms (ES256)"},
		{"key type the issuer does not allow", jwks(with(ed, "alg", absent)), nil, "fits none"},
		{"unsupported curve", jwks(with(ec, "crv", "P-521")), nil, "not supported"},
		{"unsupported kty", jwks(with(ec, "kty", "XYZ")), nil, "not supported"},
		{"even exponent", jwks(with(rs, "e", b64([]byte{1, 0, 0}))), []func(*configv1.Issuer){all}, "exponent"},
		{"padded base64", jwks(with(ec, "x", ec["x"].(string)+"=")), nil, "not unpadded base64url"},
		{"not JSON", `{"keys":[`, nil, "not a JSON object"},
		{"no keys member", `{"Keys":[]}`, nil, `no "keys" member`},
		{"only encryption keys", jwks(with(ec, "use", "enc")), nil, "no signing keys"},
		{"no keys at all", "", nil, "no keys"},
		{"jwks_url not https", "", []func(*configv1.Issuer){func(is *configv1.Issuer) { is.JwksUrl = "http://x/" }}, "https"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := jwt.New(jwt.Options{Logger: testLog})
			defer v.Close()
			err := v.Update([]*configv1.Issuer{issuer(tt.jwks, tt.mods...)}, nil)
			if err == nil {
				t.Fatalf("Update succeeded, want an error with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `issuer "main"`) {
				t.Errorf("Update = %q, want it to name issuer \"main\" and say %q", err, tt.want)
			}
		})
	}
}

func TestUpdateAcceptsUsableKeySets(t *testing.T) {
	t.Parallel()
	ec := newSigner(t, "ES256", "ec")
	rs := newSigner(t, "RS256", "rs")
	noAlg := with(ec.jwk(), "alg", absent, "use", absent)
	enc := with(rs.jwk(), "kid", "enc", "use", "enc", "alg", "RSA-OAEP")
	extra := with(ec.jwk(), "key_ops", []string{"verify"}, "x5t", "abc", "ext", true)
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwks(noAlg, enc)))
	wantOK(t, v, ec.mint(t, claims()))
	wantReason(t, v, ec.mint(t, claims(), "kid", "enc"), "unknown kid")
	if err := v.Update([]*configv1.Issuer{issuer(jwks(extra))}, nil); err != nil {
		t.Fatalf("Update with unknown members: %v", err)
	}
	wantOK(t, v, ec.mint(t, claims()))
}

// TestUpdateIsAllOrNothing: a bad issuer leaves the previous snapshot in
// place, good issuers included.
func TestUpdateIsAllOrNothing(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(a)))
	tok := a.mint(t, claims())
	wantOK(t, v, tok)
	b := newSigner(t, "ES256", "b")
	good := issuer(jwksOf(b))
	bad := &configv1.Issuer{Name: "bad", Issuer: "https://bad.example.com/", Audiences: []string{"api"}, JwksJson: `{"keys":[{}]}`}
	err := v.Update([]*configv1.Issuer{good, bad}, nil)
	if err == nil || !strings.Contains(err.Error(), `issuer "bad"`) {
		t.Fatalf("Update = %v, want an error naming issuer \"bad\"", err)
	}
	wantOK(t, v, a.mint(t, claims()))
	wantReason(t, v, b.mint(t, claims()), "unknown kid")

	dup := issuer(jwksOf(b), func(is *configv1.Issuer) { is.Name = "other" })
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(a)), dup}, nil); err == nil || !strings.Contains(err.Error(), "also issuer") {
		t.Fatalf("Update with one iss twice = %v, want an error", err)
	}
}

// TestKeyRotation follows a rotation: publish the new key next to the old,
// sign with the new, retire the old, whose tokens fail at once even though
// they are cached.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	old := newSigner(t, "ES256", "2024")
	next := newSigner(t, "ES256", "2025")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(old)))
	oldTok := old.mint(t, claims())
	nextTok := next.mint(t, claims())
	wantOK(t, v, oldTok)
	wantReason(t, v, nextTok, "unknown kid")
	if !jwt.Cached(v, oldTok) {
		t.Fatal("old token not cached")
	}

	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(old, next))}, nil); err != nil {
		t.Fatal(err)
	}
	wantOK(t, v, oldTok)
	wantOK(t, v, nextTok)

	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(next))}, nil); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v, oldTok, "unknown kid")
	wantOK(t, v, nextTok)

	// The same kid now names another key: cached tokens of the first fail.
	if !jwt.Cached(v, nextTok) {
		t.Fatal("new token not cached")
	}
	swapped := newSigner(t, "ES256", "2025")
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(swapped))}, nil); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v, nextTok, "invalid signature")
}

// TestUpdateKeepsCacheForUnchangedIssuer: a deny-list Update does not
// throw away the cached tokens of issuers that did not change.
func TestUpdateKeepsCacheForUnchangedIssuer(t *testing.T) {
	t.Parallel()
	k := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(k)))
	tok := k.mint(t, claims())
	wantOK(t, v, tok)
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(k))}, nil); err != nil {
		t.Fatal(err)
	}
	if !jwt.Cached(v, tok) {
		t.Error("cached token dropped by an Update that changed nothing")
	}
	wantOK(t, v, tok)
	// Removing the audience the token was cached under must count at once.
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(k), func(is *configv1.Issuer) { is.Audiences = []string{"other"} })}, nil); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v, tok, "audience not allowed")
}
