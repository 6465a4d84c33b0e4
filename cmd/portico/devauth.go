package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// devIdentity is what `portico dev` makes up so its demo calls can
// authenticate: a tenant with an app on a plan, an API key for the app
// (issued by the key service), and a JWT issuer whose signing key only
// this process holds.
type devIdentity struct {
	Key       string // the raw demo API key, printed once, never logged
	KeyID     string // its id, for porticoctl keys revoke
	Token     string // an access token minted by the demo issuer; it lives 15 minutes, as the seed's do
	issuerKey *ecdsa.PrivateKey
	jwks      string
}

const (
	devTenant   = "tenant-demo"
	devApp      = "app-demo"
	devPlan     = "demo"
	devRate     = 20 // per second, per caller
	devBurst    = 40
	devIssuer   = "https://issuer.portico.dev.local/"
	devAudience = "portico-dev"
	devKID      = "dev-1"
)

func newDevIdentity() (*devIdentity, error) {
	signer, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	d := &devIdentity{issuerKey: signer}
	if d.jwks, err = jwksOf(devKID, &signer.PublicKey); err != nil {
		return nil, err
	}
	if d.Token, err = d.mint(jwt.DefaultMaxTokenLifetime); err != nil {
		return nil, err
	}
	return d, nil
}

// mint signs an access token for a demo user, valid for ttl.
func (d *devIdentity) mint(ttl time.Duration) (string, error) {
	now := time.Now()
	claims := gojwt.MapClaims{
		"iss":       devIssuer,
		"aud":       devAudience,
		"sub":       "user-42",
		"client_id": devApp,
		"scope":     "inventory:read inventory:write orders:read",
		"plan":      devPlan,
		"tenant":    devTenant,
		"iat":       now.Unix(),
		"nbf":       now.Unix(),
		"exp":       now.Add(ttl).Unix(),
		"jti":       base64.RawURLEncoding.EncodeToString(randomBytes(12)),
	}
	t := gojwt.NewWithClaims(gojwt.SigningMethodES256, claims)
	t.Header["kid"] = devKID
	return t.SignedString(d.issuerKey)
}

// jwksOf is the JSON Web Key Set holding pub.
func jwksOf(kid string, pub *ecdsa.PublicKey) (string, error) {
	ecdhKey, err := pub.ECDH()
	if err != nil {
		return "", err
	}
	raw := ecdhKey.Bytes() // 0x04 || X || Y
	b, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
		"x": base64.RawURLEncoding.EncodeToString(raw[1:33]),
		"y": base64.RawURLEncoding.EncodeToString(raw[33:]),
	}}})
	return string(b), err
}

// addTo puts the demo catalog and issuer into cfg.
func (d *devIdentity) addTo(cfg *configv1.Snapshot) {
	addCatalog(cfg)
	d.addIssuer(cfg)
}

// addCatalog puts the demo products, plan and scopes into cfg.
func addCatalog(cfg *configv1.Snapshot) {
	cfg.Products = []*configv1.Product{
		{Name: "inventory-api", Description: "the demo REST inventory"},
		{Name: "orders-api", Description: "the demo gRPC orders service"},
	}
	cfg.Plans = []*configv1.Plan{{
		Name: devPlan, Products: []string{"inventory-api", "orders-api"},
		// Small on purpose: a loop of curl calls shows a 429 within seconds.
		RateLimits: []*configv1.RateLimit{{
			Name: "default", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER,
			Rate: devRate, Burst: devBurst,
		}},
	}}
	cfg.Scopes = []*configv1.Scope{
		{Name: "inventory:read"}, {Name: "inventory:write"},
		{Name: "orders:read"}, {Name: "orders:write"},
	}
}

// devScopes are the demo key's scopes: no inventory:write, so the demo
// key shows what a 403 looks like.
var devScopes = []string{"inventory:read", "orders:read", "orders:write"}

// addIssuer adds the demo issuer to cfg (its signing key is made up at
// start and lives as long as this process).
func (d *devIdentity) addIssuer(cfg *configv1.Snapshot) {
	for _, is := range cfg.Issuers {
		if is.GetName() == "dev" {
			return
		}
	}
	cfg.Issuers = append(cfg.Issuers, &configv1.Issuer{
		Name: "dev", Issuer: devIssuer, Audiences: []string{devAudience}, JwksJson: d.jwks,
	})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return b
}
