package jwt_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func TestVerifyRefusesBeforeUpdate(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "ES256", "k1")
	v := jwt.New(jwt.Options{Logger: testLog})
	defer v.Close()
	wantReason(t, v, s.mint(t, claims()), "not configured")
}

func TestVerifyAttacks(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	other := newSigner(t, "ES256", "k1") // same kid, different key
	rsaKey := newSigner(t, "RS256", "r1")
	pub := key.priv.Public().(*ecdsa.PublicKey)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	point, err := pub.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	xy := point[1:] // the JWK's x || y

	// A second issuer that allows RS256, so its tokens meet a config that
	// would verify them; and the main one allows ES256 only.
	second := &configv1.Issuer{
		Name: "second", Issuer: "https://second.example.com/", Audiences: []string{"api"},
		Algorithms: []configv1.JWTAlgorithm{rs256}, JwksJson: jwksOf(rsaKey),
	}
	small := &configv1.Issuer{
		Name: "small", Issuer: "https://small.example.com/", Audiences: []string{"api"},
		JwksJson: jwksOf(key), MaxTokenBytes: 600,
	}
	v := newVerifier(t, nil, jwt.Options{CacheSize: -1}, issuer(jwksOf(key)), second, small)

	hmac := func(k []byte) string {
		tok := gojwt.NewWithClaims(gojwt.SigningMethodHS256, gojwt.MapClaims(claims()))
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return remember(s)
	}
	valid := key.mint(t, claims())
	parts := strings.Split(valid, ".")
	sig, _ := b64decode(parts[2])
	withSig := func(sig []byte) string { return remember(parts[0] + "." + parts[1] + "." + b64(sig)) }
	hdr := `{"alg":"ES256","kid":"k1","typ":"JWT"}`
	body := payloadJSON(claims())
	// The attacker's own key, embedded as jwk and signing the token.
	attacker := newSigner(t, "ES256", "k1")
	attackerJWK := attacker.jwk()

	jkuHits := atomic.Int64{}
	jku := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jkuHits.Add(1)
		_, _ = w.Write([]byte(jwksOf(attacker)))
	}))
	defer jku.Close()

	tests := []struct {
		name   string
		token  string
		reason string
	}{
		{"alg none", raw(`{"alg":"none","kid":"k1"}`, body, nil), "malformed token"},
		{"alg none with a signature", raw(`{"alg":"none","kid":"k1"}`, body, []byte("x")), "algorithm not allowed"},
		{"HS256 keyed with the public key PEM", hmac(pemBytes), "algorithm not allowed"},
		{"HS256 keyed with the public key DER", hmac(der), "algorithm not allowed"},
		{"HS256 keyed with the JWK's x||y", hmac(xy), "algorithm not allowed"},
		{"unknown kid", key.mint(t, claims(), "kid", "k2"), "unknown kid"},
		{"kid with a path", key.mint(t, claims(), "kid", "../../x"), "invalid kid"},
		{"kid with a slash", key.mint(t, claims(), "kid", "a/b"), "invalid kid"},
		{"kid too long", key.mint(t, claims(), "kid", strings.Repeat("a", 129)), "invalid kid"},
		{"kid empty", key.mint(t, claims(), "kid", ""), "invalid kid"},
		{"kid not a string", key.mint(t, claims(), "kid", 7), "invalid kid"},
		{"no kid", key.mint(t, claims(), "kid", absent), "missing kid"},
		{"no alg", raw(`{"kid":"k1"}`, body, sig), "missing alg"},
		{"wrong iss", key.mint(t, claims("iss", "https://evil.example.com/")), "unknown issuer"},
		{"iss differs by a slash", key.mint(t, claims("iss", "https://issuer.example.com")), "unknown issuer"},
		{"no iss", key.mint(t, claims("iss", absent)), "missing iss"},
		{"iss not a string", key.mint(t, claims("iss", 1)), "invalid iss claim"},
		{"other issuer's iss, alg it does not allow", key.mint(t, claims("iss", "https://second.example.com/")), "algorithm not allowed"},
		{"other issuer's iss, its key, our alg", rsaKey.mint(t, claims()), "algorithm not allowed"},
		{"RS256 when only ES256 is allowed", newSigner(t, "RS256", "k1").mint(t, claims()), "algorithm not allowed"},
		{"wrong aud", key.mint(t, claims("aud", "other")), "audience not allowed"},
		{"wrong aud array", key.mint(t, claims("aud", []string{"a", "b"})), "audience not allowed"},
		{"no aud", key.mint(t, claims("aud", absent)), "missing aud"},
		{"aud not strings", key.mint(t, claims("aud", []any{1})), "invalid aud claim"},
		{"expired beyond leeway", key.mint(t, claims("exp", t0.Add(-31*time.Second).Unix())), "expired"},
		{"no exp", key.mint(t, claims("exp", absent)), "missing exp"},
		{"exp a string", key.mint(t, claims("exp", "2100-01-01")), "invalid exp claim"},
		{"exp negative", key.mint(t, claims("exp", -1)), "invalid exp claim"},
		{"exp past year 9999", key.mint(t, claims("exp", 1e15)), "invalid exp claim"},
		{"nbf beyond leeway", key.mint(t, claims("nbf", t0.Add(31*time.Second).Unix())), "not yet valid"},
		{"iat in the future", key.mint(t, claims("iat", t0.Add(31*time.Second).Unix())), "issued in the future"},
		{"sub not a string", key.mint(t, claims("sub", 42)), "invalid sub claim"},
		{"sub with a line break", key.mint(t, claims("sub", "a\r\nx-auth-admin: 1")), "invalid sub claim"},
		{"signature of another key with the same kid", other.mint(t, claims()), "invalid signature"},
		{"r=0 s=0", withSig(make([]byte, 64)), "invalid signature"},
		{"truncated signature", withSig(sig[:63]), "invalid signature"},
		{"signature with extra bytes", withSig(append(append([]byte{}, sig...), 0)), "invalid signature"},
		{"signature of another payload", remember(key.mint(t, claims())[:len(parts[0])+1] + b64([]byte(payloadJSON(claims("sub", "admin")))) + "." + parts[2]), "invalid signature"},
		{"empty signature", remember(parts[0] + "." + parts[1] + "."), "malformed token"},
		{"oversized", key.mint(t, claims("pad", strings.Repeat("x", 8<<10))), "token too large"},
		{"over the issuer's own limit", remember(strings.Replace(key.mint(t, claims("iss", "https://small.example.com/", "pad", strings.Repeat("x", 300))), "", "", 1)), "token too large"},
		{"crit header", key.mint(t, claims(), "crit", []string{"exp"}), "crit not supported"},
		{"crit header empty", key.mint(t, claims(), "crit", []string{}), "crit not supported"},
		{"two sub", key.signRaw(t, hdr, `{"iss":"`+mainIss+`","aud":"api","exp":1800003600,"sub":"alice","sub":"admin"}`), "duplicate claim"},
		{"two exp", key.signRaw(t, hdr, `{"iss":"`+mainIss+`","aud":"api","exp":1,"exp":1800003600}`), "duplicate claim"},
		{"two iss", key.signRaw(t, hdr, `{"iss":"https://second.example.com/","iss":"`+mainIss+`","aud":"api","exp":1800003600}`), "duplicate claim"},
		{"two sub, one escaped", key.signRaw(t, hdr, `{"iss":"`+mainIss+`","aud":"api","exp":1800003600,"sub":"alice","s\u0075b":"admin"}`), "duplicate claim"},
		{"two alg", key.signRaw(t, `{"alg":"ES256","alg":"none","kid":"k1"}`, body), "duplicate header member"},
		{"two kid", key.signRaw(t, `{"alg":"ES256","kid":"k2","kid":"k1"}`, body), "duplicate header member"},
		{"jwk header with the attacker's key", attacker.mint(t, claims(), "jwk", attackerJWK), "invalid signature"},
		{"jwk header, attacker's kid", attacker.mint(t, claims(), "kid", "evil", "jwk", attackerJWK), "unknown kid"},
		{"jku header, attacker's key", attacker.mint(t, claims(), "jku", jku.URL), "invalid signature"},
		{"x5u header, attacker's key", attacker.mint(t, claims(), "x5u", jku.URL), "invalid signature"},
		{"x5c header, attacker's key", attacker.mint(t, claims(), "x5c", []string{"MIIB"}), "invalid signature"},
		{"two segments", remember(parts[0] + "." + parts[1]), "malformed token"},
		{"four segments", remember(valid + "." + parts[2]), "malformed token"},
		{"one segment", remember(parts[1]), "malformed token"},
		{"empty", "", "malformed token"},
		{"padding", remember(parts[0] + "=." + parts[1] + "." + parts[2]), "malformed token"},
		{"standard base64", remember(parts[0] + "." + parts[1] + ".+" + parts[2][1:]), "malformed token"},
		{"line break", remember(parts[0] + "\n." + parts[1] + "." + parts[2]), "malformed token"},
		{"Bearer prefix", remember("Bearer " + valid), "malformed token"},
		{"non-canonical base64", remember(parts[0][:len(parts[0])-1] + nonCanonical(parts[0]) + "." + parts[1] + "." + parts[2]), "malformed token"},
		{"header not JSON", raw(`alg=ES256`, body, sig), "malformed header"},
		{"header an array", raw(`["ES256"]`, body, sig), "malformed header"},
		{"header with trailing data", raw(hdr+`{}`, body, sig), "malformed header"},
		{"payload not JSON", raw(hdr, `sub=admin`, sig), "malformed claims"},
		{"payload null", raw(hdr, `null`, sig), "malformed claims"},
		{"payload with invalid UTF-8", raw(hdr, "{\"iss\":\""+mainIss+"\",\"sub\":\"\xff\"}", sig), "malformed claims"},
		{"payload with a lone surrogate", raw(hdr, `{"iss":"`+mainIss+`","sub":"\ud800"}`, sig), "malformed claims"},
		{"payload number out of range", raw(hdr, `{"iss":"`+mainIss+`","x":1e400}`, sig), "malformed claims"},
		{"payload nested too deep", raw(hdr, `{"iss":"`+mainIss+`","x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`, sig), "malformed claims"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantReason(t, v, tt.token, tt.reason)
		})
	}
	if n := jkuHits.Load(); n != 0 {
		t.Errorf("the jku/x5u server got %d requests, want 0", n)
	}
}

// nonCanonical returns the last character of seg changed so that it decodes
// to the same bytes with non-zero trailing bits, or seg's own last
// character if no such spelling exists.
func nonCanonical(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if len(seg)%4 == 0 {
		return seg[len(seg)-1:]
	}
	i := strings.IndexByte(alphabet, seg[len(seg)-1])
	return alphabet[i+1 : i+2]
}

func b64decode(s string) ([]byte, error) { return gojwt.NewParser().DecodeSegment(s) }

// TestVerifyIgnoresKeyURLs: a token signed with the configured key that
// also points elsewhere verifies with the configured key, and nothing is
// fetched.
func TestVerifyIgnoresKeyURLs(t *testing.T) {
	t.Parallel()
	hits := atomic.Int64{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	key := newSigner(t, "ES256", "k1")
	attacker := newSigner(t, "ES256", "evil")
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, issuer(jwksOf(key)))
	for _, h := range [][]any{
		{"jku", srv.URL + "/jwks"},
		{"x5u", srv.URL + "/cert"},
		{"jwk", attacker.jwk()},
		{"x5c", []string{"MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"}},
	} {
		wantOK(t, v, key.mint(t, claims(), h...))
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests to the URLs in the header, want 0", n)
	}
}

func TestVerifyLeeway(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{CacheSize: -1}, issuer(jwksOf(key)))
	tight := newVerifier(t, nil, jwt.Options{CacheSize: -1}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.Leeway = durationpbNew(0)
	}))
	for _, tt := range []struct {
		name         string
		c            map[string]any
		wantDefault  string
		wantNoLeeway string
	}{
		{"expired within leeway", claims("exp", t0.Add(-29*time.Second).Unix()), "", "expired"},
		{"expires now", claims("exp", t0.Unix()), "", "expired"},
		{"nbf within leeway", claims("nbf", t0.Add(29*time.Second).Unix()), "", "not yet valid"},
		{"iat within leeway", claims("iat", t0.Add(29*time.Second).Unix()), "", "issued in the future"},
		{"fractional exp", claims("exp", float64(t0.Unix())+0.5), "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := key.mint(t, tt.c)
			for _, c := range []struct {
				v    *jwt.Verifier
				want string
			}{{v, tt.wantDefault}, {tight, tt.wantNoLeeway}} {
				if c.want == "" {
					wantOK(t, c.v, tok)
				} else {
					wantReason(t, c.v, tok, c.want)
				}
			}
		})
	}
}

func TestVerifyAlgorithms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		alg string
		cfg configv1.JWTAlgorithm
	}{
		{"ES256", es256}, {"ES384", es384}, {"RS256", rs256}, {"PS256", ps256}, {"EdDSA", eddsa},
	} {
		t.Run(tt.alg, func(t *testing.T) {
			t.Parallel()
			key := newSigner(t, tt.alg, "k-"+tt.alg)
			v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(key), algs(tt.cfg)))
			c := wantOK(t, v, key.mint(t, claims()))
			if c.Issuer != "main" || c.Subject != "user-1" {
				t.Errorf("Verify = %+v, want issuer main, subject user-1", c)
			}
			// Allowed, but not by this issuer: every other algorithm.
			only := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(newSigner(t, "ES256", "other")), algs(es256)))
			if tt.alg != "ES256" {
				wantReason(t, only, key.mint(t, claims()), "algorithm not allowed")
			}
		})
	}
}

// TestVerifyAlgorithmMustFitKey: with RS256 and ES256 both allowed, an
// RS256 token cannot name the EC key.
func TestVerifyAlgorithmMustFitKey(t *testing.T) {
	t.Parallel()
	ec := newSigner(t, "ES256", "ec")
	rs := newSigner(t, "RS256", "rs")
	ecJWK := ec.jwk()
	delete(ecJWK, "alg")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwks(ecJWK, rs.jwk()), algs(es256, rs256)))
	wantOK(t, v, ec.mint(t, claims()))
	wantOK(t, v, rs.mint(t, claims()))
	wantReason(t, v, rs.mint(t, claims(), "kid", "ec"), "algorithm does not fit key")
	wantReason(t, v, ec.mint(t, claims(), "kid", "rs"), "algorithm does not fit key")
}

func TestVerifyClaims(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.Audiences = []string{"api", "api2"}
		is.DefaultPlan = "free"
	}))
	custom := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.TenantClaim = "https://example.com/org"
		is.PlanClaim = "tier"
	}))
	for _, tt := range []struct {
		name string
		v    *jwt.Verifier
		c    map[string]any
		want jwt.Claims
	}{
		{"aud string, defaults", v, claims("jti", "j1"),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", JTI: "j1", IssuedAt: t0.Unix(), ExpiresAt: t0.Unix() + 600}},
		{"aud array, second audience", v, claims("aud", []string{"x", "api2"}, "jti", "j1"),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", JTI: "j1", IssuedAt: t0.Unix(), ExpiresAt: t0.Unix() + 600}},
		{"scope", v, claims("scope", "read write", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", Scopes: "read write", ExpiresAt: t0.Unix() + 600}},
		{"scp array", v, claims("scp", []string{"read", "write"}, "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", Scopes: "read write", ExpiresAt: t0.Unix() + 600}},
		{"scp string", v, claims("scp", "read write", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", Scopes: "read write", ExpiresAt: t0.Unix() + 600}},
		{"scope wins over scp", v, claims("scope", "a", "scp", []string{"b"}, "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", Scopes: "a", ExpiresAt: t0.Unix() + 600}},
		{"client_id", v, claims("client_id", "c1", "azp", "c2", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", ClientID: "c1", ExpiresAt: t0.Unix() + 600}},
		{"azp", v, claims("azp", "c2", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", ClientID: "c2", ExpiresAt: t0.Unix() + 600}},
		{"plan and tenant", v, claims("plan", "gold", "tenant", "acme", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "gold", Tenant: "acme", ExpiresAt: t0.Unix() + 600}},
		{"empty plan falls back", v, claims("plan", "", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "free", ExpiresAt: t0.Unix() + 600}},
		{"custom claim names", custom, claims("tier", "gold", "https://example.com/org", "acme", "plan", "x", "tenant", "y", "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", Plan: "gold", Tenant: "acme", ExpiresAt: t0.Unix() + 600}},
		{"no default plan", custom, claims("jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Subject: "user-1", ExpiresAt: t0.Unix() + 600}},
		{"null claims are absent", v, claims("sub", nil, "nbf", nil, "jti", absent, "iat", absent),
			jwt.Claims{Issuer: "main", Plan: "free", ExpiresAt: t0.Unix() + 600}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := key.mint(t, tt.c)
			if got := wantOK(t, tt.v, tok); got != tt.want {
				t.Errorf("Verify = %+v, want %+v", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name, reason string
		c            map[string]any
	}{
		{"plan not a string", "invalid plan claim", claims("plan", 3)},
		{"tenant an object", "invalid tenant claim", claims("tenant", map[string]any{"id": 1})},
		{"scp with a space", "invalid scp claim", claims("scp", []string{"read write"})},
		{"scp with a number", "invalid scp claim", claims("scp", []any{"read", 1})},
		{"scope an array", "invalid scope claim", claims("scope", []string{"read"})},
		{"client_id a number", "invalid client_id claim", claims("client_id", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantReason(t, v, key.mint(t, tt.c), tt.reason)
		})
	}
}

// TestVerifyLifetime: a token that lives longer than its issuer's
// max_token_lifetime (15 minutes plus leeway unless set) is refused, by
// exp - iat, or by exp - now when it has no iat.
func TestVerifyLifetime(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	clk := newClock()
	def := newVerifier(t, clk, jwt.Options{CacheSize: -1}, issuer(jwksOf(key)))
	hour := newVerifier(t, clk, jwt.Options{CacheSize: -1}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.MaxTokenLifetime = durationpbNew(time.Hour)
	}))
	tight := newVerifier(t, clk, jwt.Options{CacheSize: -1}, issuer(jwksOf(key), func(is *configv1.Issuer) {
		is.Leeway = durationpbNew(0)
	}))
	const max = 15*time.Minute + 30*time.Second // the default for the default leeway
	at := func(d time.Duration) int64 { return t0.Add(d).Unix() }
	for _, tt := range []struct {
		name            string
		c               map[string]any
		def, hour, tght string // the reasons; "" accepts
	}{
		{"the longest lifetime", claims("exp", at(max)), "", "", "lifetime too long"},
		{"a second longer", claims("exp", at(max+time.Second)), "lifetime too long", "", "lifetime too long"},
		{"15 minutes", claims("exp", at(15*time.Minute)), "", "", ""},
		{"an hour", claims("exp", at(time.Hour)), "lifetime too long", "", "lifetime too long"},
		{"an hour and a second", claims("exp", at(time.Hour+time.Second)), "lifetime too long", "lifetime too long", "lifetime too long"},
		{"issued long ago, expiring soon", claims("iat", at(-50*time.Minute), "exp", at(time.Minute)), "lifetime too long", "", "lifetime too long"},
		{"no iat, exp near", claims("iat", absent, "exp", at(max)), "", "", "lifetime too long"},
		{"no iat, exp far", claims("iat", absent, "exp", at(max+time.Second)), "lifetime too long", "", "lifetime too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := key.mint(t, tt.c)
			for _, c := range []struct {
				name string
				v    *jwt.Verifier
				want string
			}{{"default", def, tt.def}, {"1h", hour, tt.hour}, {"no leeway", tight, tt.tght}} {
				_, err := verify(t, c.v, tok)
				switch {
				case c.want == "" && err != nil:
					t.Errorf("%s: Verify = %q, want success", c.name, err.Reason)
				case c.want != "" && (err == nil || err.Reason != c.want || err.Issuer != "main"):
					t.Errorf("%s: Verify = %v, want %q of issuer main", c.name, err, c.want)
				}
			}
		})
	}

	// Without iat a token's lifetime is what is left of it: one minted to
	// live an hour is refused until its exp is near enough.
	far := key.mint(t, claims("iat", absent, "exp", at(time.Hour)))
	wantReason(t, def, far, "lifetime too long")
	clk.Set(t0.Add(time.Hour - max))
	wantOK(t, def, far)
}

// TestIssuerLifetimeConfig: a max_token_lifetime or leeway past
// config.proto's bounds is refused: deny entries would not outlast such
// tokens on every holder.
func TestIssuerLifetimeConfig(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{})
	for _, tt := range []struct {
		name string
		mod  func(*configv1.Issuer)
		want string
	}{
		{"zero lifetime", func(is *configv1.Issuer) { is.MaxTokenLifetime = durationpbNew(0) }, "max_token_lifetime must be positive and at most 24h0m0s"},
		{"negative lifetime", func(is *configv1.Issuer) { is.MaxTokenLifetime = durationpbNew(-time.Second) }, "max_token_lifetime must be positive"},
		{"a lifetime over a day", func(is *configv1.Issuer) { is.MaxTokenLifetime = durationpbNew(24*time.Hour + time.Second) }, "max_token_lifetime must be positive and at most 24h0m0s"},
		{"a leeway over 5 minutes", func(is *configv1.Issuer) { is.Leeway = durationpbNew(5*time.Minute + time.Second) }, "leeway must be between 0 and 5m0s"},
		{"a day", func(is *configv1.Issuer) { is.MaxTokenLifetime = durationpbNew(24 * time.Hour) }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := v.CheckIssuer(issuer(jwksOf(key), tt.mod))
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("CheckIssuer = %v, want %q", err, tt.want)
			}
		})
	}
}
