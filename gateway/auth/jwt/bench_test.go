package jwt_test

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// realistic are the claims of a typical access token: with an ES256
// signature the token is about 700 bytes.
func realistic() map[string]any {
	return claims(
		"aud", []string{"https://api.example.com"},
		"sub", "auth0|5f7c8ec7c33c6c004bbafe82",
		"nbf", t0.Unix(),
		"auth_time", t0.Add(-time.Hour).Unix(),
		"jti", "8f14e45f-ceea-467f-a0e6-5a7d8b1c2e3f",
		"client_id", "s6BhdRkqt3-portal",
		"scope", "openid profile email read:orders write:orders read:invoices",
		"tenant", "acme-corp",
		"plan", "gold",
		"acr", "urn:mace:incommon:iap:silver",
		"amr", []string{"pwd", "mfa"},
		"email", "jane.doe@example.com",
		"x_canary", absent,
	)
}

func benchVerifier(b *testing.B, alg string, cfg configv1.JWTAlgorithm, cacheSize int) (*jwt.Verifier, string) {
	key := newSigner(b, alg, "key-2025-01")
	v := newVerifier(b, nil, jwt.Options{CacheSize: cacheSize}, issuer(jwksOf(key), algs(cfg), func(is *configv1.Issuer) {
		is.Audiences = []string{"https://api.example.com"}
	}))
	tok := key.mint(b, realistic())
	if _, err := v.Verify(tok); err != nil {
		b.Fatal(err)
	}
	return v, tok
}

func runVerify(b *testing.B, v *jwt.Verifier, tok string) {
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkECDSAVerifyBare is the floor: crypto/ecdsa alone checking a
// P-256 signature over a SHA-256 digest.
func BenchmarkECDSAVerifyBare(b *testing.B) {
	key := newSigner(b, "ES256", "k").priv.(*ecdsa.PrivateKey)
	digest := sha256.Sum256([]byte("header.payload"))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !ecdsa.Verify(&key.PublicKey, digest[:], r, s) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkVerifyES256 is a full check of a token not in the cache.
func BenchmarkVerifyES256(b *testing.B) {
	v, tok := benchVerifier(b, "ES256", es256, -1)
	runVerify(b, v, tok)
}

// BenchmarkVerifyES256Miss is BenchmarkVerifyES256 with the cache on but
// never hit: distinct tokens, one entry. It adds hashing and the insert.
func BenchmarkVerifyES256Miss(b *testing.B) {
	key := newSigner(b, "ES256", "key-2025-01")
	v := newVerifier(b, nil, jwt.Options{CacheSize: 1}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.Audiences = []string{"https://api.example.com"}
	}))
	toks := make([]string, 512)
	for i := range toks {
		toks[i] = key.mint(b, realistic())
	}
	b.SetBytes(int64(len(toks[0])))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := v.Verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkVerifyCached is a repeat token: a cache hit.
func BenchmarkVerifyCached(b *testing.B) {
	v, tok := benchVerifier(b, "ES256", es256, 0)
	runVerify(b, v, tok)
}

func BenchmarkVerifyCachedParallel(b *testing.B) {
	v, tok := benchVerifier(b, "ES256", es256, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.Verify(tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkVerifyRS256(b *testing.B) {
	v, tok := benchVerifier(b, "RS256", rs256, -1)
	runVerify(b, v, tok)
}

func BenchmarkVerifyEdDSA(b *testing.B) {
	v, tok := benchVerifier(b, "EdDSA", eddsa, -1)
	runVerify(b, v, tok)
}

// BenchmarkVerifyForged is a token whose signature fails: what a flood of
// forgeries costs.
func BenchmarkVerifyForged(b *testing.B) {
	v, _ := benchVerifier(b, "ES256", es256, -1)
	tok := newSigner(b, "ES256", "key-2025-01").mint(b, realistic())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok); err == nil {
			b.Fatal("forged token accepted")
		}
	}
}

// BenchmarkGoJWTParseES256 is golang-jwt's own parser on the same token,
// for reference: what decoding the claims twice would cost.
func BenchmarkGoJWTParseES256(b *testing.B) {
	key := newSigner(b, "ES256", "key-2025-01")
	tok := key.mint(b, realistic())
	pub := key.priv.Public()
	p := gojwt.NewParser(
		gojwt.WithValidMethods([]string{"ES256"}),
		gojwt.WithAudience("https://api.example.com"),
		gojwt.WithIssuer(mainIss),
		gojwt.WithExpirationRequired(),
		gojwt.WithIssuedAt(),
		gojwt.WithLeeway(30*time.Second),
		gojwt.WithTimeFunc(func() time.Time { return t0 }),
	)
	keyfunc := func(*gojwt.Token) (any, error) { return pub, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ParseWithClaims(tok, gojwt.MapClaims{}, keyfunc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkES256VersusBare alternates a full Verify (cache off) and the
// bare ECDSA check in one loop and times each, so both see the same
// machine: on a shared box separate benchmarks drift by more than the 10 %
// being measured. It reports both costs and their ratio.
func BenchmarkES256VersusBare(b *testing.B) {
	key := newSigner(b, "ES256", "key-2025-01")
	v := newVerifier(b, nil, jwt.Options{CacheSize: -1}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.Audiences = []string{"https://api.example.com"}
	}))
	tok := key.mint(b, realistic())
	priv := key.priv.(*ecdsa.PrivateKey)
	digest := sha256.Sum256([]byte(tok))
	r, s, err := ecdsa.Sign(rand.Reader, priv, digest[:])
	if err != nil {
		b.Fatal(err)
	}
	var bare, full time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t := time.Now()
		if !ecdsa.Verify(&priv.PublicKey, digest[:], r, s) {
			b.Fatal("invalid")
		}
		t1 := time.Now()
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		bare += t1.Sub(t)
		full += t2.Sub(t1)
	}
	b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-ns/op")
	b.ReportMetric(float64(full.Nanoseconds())/float64(b.N), "verify-ns/op")
	b.ReportMetric(float64(full)/float64(bare), "ratio")
}

func BenchmarkPreparse(b *testing.B) {
	key := newSigner(b, "ES256", "key-2025-01")
	tok := key.mint(b, realistic())
	b.ReportAllocs()
	for b.Loop() {
		if _, r := jwt.Preparse(tok); r != "" {
			b.Fatal(r)
		}
	}
}
