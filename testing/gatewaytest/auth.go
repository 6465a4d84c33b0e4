package gatewaytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// NewKey makes an API key and its record for app in tenant on plan with
// scopes. The record is active and never expires; tests edit it as needed.
func NewKey(t testing.TB, keyID, app, tenant, plan string, scopes ...string) (string, *configv1.KeyRecord) {
	t.Helper()
	key, err := apikey.Generate(apikey.Live, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(key))
	return key, &configv1.KeyRecord{
		Sha256: sum[:], KeyId: keyID, AppId: app, TenantId: tenant, Plan: plan, Scopes: scopes,
		Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
	}
}

// Issuer is a test OAuth 2.0 authorization server signing ES256 tokens.
type Issuer struct {
	Name, URL, Audience, KID string
	Key                      *ecdsa.PrivateKey
}

// NewIssuer makes an issuer with a fresh P-256 key.
func NewIssuer(t testing.TB, name string) *Issuer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{Name: name, URL: "https://" + name + ".example.com/", Audience: "portico-tests", KID: name + "-1", Key: k}
}

// JWKS is the issuer's key set as JSON.
func (is *Issuer) JWKS(t testing.TB) string {
	t.Helper()
	e, err := is.Key.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := e.Bytes()
	b, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": is.KID, "alg": "ES256", "use": "sig",
		"x": base64.RawURLEncoding.EncodeToString(raw[1:33]),
		"y": base64.RawURLEncoding.EncodeToString(raw[33:]),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Config is the issuer's snapshot entry.
func (is *Issuer) Config(t testing.TB) *configv1.Issuer {
	return &configv1.Issuer{Name: is.Name, Issuer: is.URL, Audiences: []string{is.Audience}, JwksJson: is.JWKS(t)}
}

// Lifetime is how long Mint's tokens live: the seed's access-token
// lifetime, which is also the longest a gateway accepts by default.
const Lifetime = 15 * time.Minute

// Mint signs a token: iss, aud, sub ("user-1"), iat, nbf, exp (Lifetime
// from now) and jti are filled in unless claims sets them; a nil claim
// value removes the claim.
func (is *Issuer) Mint(t testing.TB, claims map[string]any) string {
	t.Helper()
	now := time.Now()
	c := gojwt.MapClaims{
		"iss": is.URL, "aud": is.Audience, "sub": "user-1",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(Lifetime).Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(randomID()),
	}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	tok := gojwt.NewWithClaims(gojwt.SigningMethodES256, c)
	tok.Header["kid"] = is.KID
	s, err := tok.SignedString(is.Key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randomID() []byte {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return b
}
