package jwt_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/logbuf"
	"github.com/portico-gw/portico/testing/testclock"
)

// Every Verifier in these tests logs at debug level into testLog, and
// every token the tests make is remembered, so TestMain can check after the
// whole run that no token, segment or claim value was ever logged.
var (
	logBuf  logbuf.Buffer
	testLog = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))

	mintedMu sync.Mutex
	minted   = map[string]bool{}
	canaries atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if msg := leaks(logBuf.String()); msg != "" {
			fmt.Fprintln(os.Stderr, "FAIL: token material in the logs:", msg)
			code = 1
		}
	}
	os.Exit(code)
}

// leaks describes the first remembered token segment, or canary claim
// value, found in s.
func leaks(s string) string {
	if i := strings.Index(s, "canary-"); i >= 0 {
		return fmt.Sprintf("a claim value at offset %d", i)
	}
	mintedMu.Lock()
	defer mintedMu.Unlock()
	for seg := range minted {
		// Whole segments, and their ends, as a truncated log line would
		// have them.
		for _, part := range []string{seg, seg[:min(len(seg), window)], seg[max(len(seg)-window, 0):]} {
			if strings.Contains(s, part) {
				return fmt.Sprintf("part of a segment: %.12q…", part)
			}
		}
	}
	return ""
}

// window is the length of a piece of a token tests look for: long enough
// not to occur by chance.
const window = 16

// hasPart reports whether s contains any window-long piece of token.
func hasPart(s, token string) bool {
	for _, seg := range strings.Split(token, ".") {
		for i := 0; i+window <= len(seg); i++ {
			if strings.Contains(s, seg[i:i+window]) {
				return true
			}
		}
	}
	return false
}

func remember(token string) string {
	mintedMu.Lock()
	defer mintedMu.Unlock()
	for _, seg := range strings.Split(token, ".") {
		if len(seg) >= window {
			minted[seg] = true
		}
	}
	return token
}

// t0 is the tests' "now".
var t0 = time.Unix(1_800_000_000, 0)

// clock is a settable Options.Now.
type clock = testclock.Clock

func newClock() *clock { return testclock.New(t0) }

// signer is a test key pair with its kid and algorithm.
type signer struct {
	kid    string
	method gojwt.SigningMethod
	priv   crypto.Signer
}

var rsaKeys struct {
	once sync.Once
	keys []*rsa.PrivateKey
}

// rsaKey hands out pre-generated 2048-bit keys: generating them is slow.
func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	rsaKeys.once.Do(func() {
		var wg sync.WaitGroup
		rsaKeys.keys = make([]*rsa.PrivateKey, 4)
		for i := range rsaKeys.keys {
			wg.Go(func() {
				k, err := rsa.GenerateKey(rand.Reader, 2048)
				if err != nil {
					panic(err)
				}
				rsaKeys.keys[i] = k
			})
		}
		wg.Wait()
	})
	return rsaKeys.keys[i%len(rsaKeys.keys)]
}

var rsaN atomic.Int64

func newSigner(t testing.TB, alg, kid string) *signer {
	t.Helper()
	s := &signer{kid: kid, method: gojwt.GetSigningMethod(alg)}
	var err error
	switch alg {
	case "ES256":
		s.priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		s.priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "RS256", "PS256":
		s.priv = rsaKey(t, int(rsaN.Add(1)))
	case "EdDSA":
		_, s.priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("no signer for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwk is the public JWK of s, with use and alg.
func (s *signer) jwk() map[string]any {
	m := map[string]any{"kid": s.kid, "use": "sig", "alg": s.method.Alg()}
	switch k := s.priv.Public().(type) {
	case *ecdsa.PublicKey:
		point, err := k.Bytes() // 0x04 || x || y
		if err != nil {
			panic(err)
		}
		size := len(point) / 2
		m["kty"], m["crv"] = "EC", k.Curve.Params().Name
		m["x"], m["y"] = b64(point[1:1+size]), b64(point[1+size:])
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", b64(k.N.Bytes()), b64(big.NewInt(int64(k.E)).Bytes())
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", b64(k)
	}
	return m
}

func jwks(keys ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func jwksOf(signers ...*signer) string {
	var keys []map[string]any
	for _, s := range signers {
		keys = append(keys, s.jwk())
	}
	return jwks(keys...)
}

// absent, as a claim or header value, leaves the member out.
type absentT struct{}

var absent = absentT{}

// claims are valid claims for issuer "main" at t0, changed by kv pairs:
// they live 10 minutes, within the default max_token_lifetime.
func claims(kv ...any) map[string]any {
	c := map[string]any{
		"iss":      "https://issuer.example.com/",
		"aud":      "api",
		"sub":      "user-1",
		"exp":      t0.Add(10 * time.Minute).Unix(),
		"iat":      t0.Unix(),
		"jti":      fmt.Sprintf("canary-jti-%d", canaries.Add(1)),
		"x_canary": fmt.Sprintf("canary-%d", canaries.Add(1)),
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == absent {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// mint signs claims with golang-jwt; hdr adds or removes header members.
func (s *signer) mint(t testing.TB, c map[string]any, hdr ...any) string {
	t.Helper()
	tok := gojwt.NewWithClaims(s.method, gojwt.MapClaims(c))
	tok.Header["kid"] = s.kid
	for i := 0; i < len(hdr); i += 2 {
		if hdr[i+1] == absent {
			delete(tok.Header, hdr[i].(string))
		} else {
			tok.Header[hdr[i].(string)] = hdr[i+1]
		}
	}
	str, err := tok.SignedString(s.priv)
	if err != nil {
		t.Fatal(err)
	}
	return remember(str)
}

// signRaw signs header and payload JSON exactly as given, for tokens
// golang-jwt would not build.
func (s *signer) signRaw(t testing.TB, header, payload string) string {
	t.Helper()
	input := b64([]byte(header)) + "." + b64([]byte(payload))
	sig, err := s.method.Sign(input, s.priv)
	if err != nil {
		t.Fatal(err)
	}
	return remember(input + "." + b64(sig))
}

// raw assembles a token from raw header and payload JSON and signature.
func raw(header, payload string, sig []byte) string {
	return remember(b64([]byte(header)) + "." + b64([]byte(payload)) + "." + b64(sig))
}

func payloadJSON(c map[string]any) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

const mainIss = "https://issuer.example.com/"

// issuer is a config for "main", changed by mods.
func issuer(jwksJSON string, mods ...func(*configv1.Issuer)) *configv1.Issuer {
	is := &configv1.Issuer{Name: "main", Issuer: mainIss, Audiences: []string{"api"}, JwksJson: jwksJSON}
	for _, m := range mods {
		m(is)
	}
	return is
}

func algs(a ...configv1.JWTAlgorithm) func(*configv1.Issuer) {
	return func(is *configv1.Issuer) { is.Algorithms = a }
}

const (
	es256 = configv1.JWTAlgorithm_JWT_ALGORITHM_ES256
	es384 = configv1.JWTAlgorithm_JWT_ALGORITHM_ES384
	rs256 = configv1.JWTAlgorithm_JWT_ALGORITHM_RS256
	ps256 = configv1.JWTAlgorithm_JWT_ALGORITHM_PS256
	eddsa = configv1.JWTAlgorithm_JWT_ALGORITHM_EDDSA
)

// newVerifier returns a Verifier on clk (t0 if nil) with the issuers
// installed, closed when the test ends.
func newVerifier(t testing.TB, clk *clock, opts jwt.Options, issuers ...*configv1.Issuer) *jwt.Verifier {
	t.Helper()
	if clk == nil {
		clk = newClock()
	}
	opts.Now = clk.Now
	opts.Logger = testLog
	v := jwt.New(opts)
	t.Cleanup(v.Close)
	if err := v.Update(issuers, nil); err != nil {
		t.Fatalf("Update: %v", err)
	}
	return v
}

// verify calls Verify and checks the error's shape: an *Error whose text
// holds no part of the token.
func verify(t testing.TB, v *jwt.Verifier, token string) (jwt.Claims, *jwt.Error) {
	t.Helper()
	c, err := v.Verify(token)
	if err == nil {
		return c, nil
	}
	var e *jwt.Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify: error %T %v, want *jwt.Error", err, err)
	}
	if c != (jwt.Claims{}) {
		t.Errorf("Verify: claims %+v with error %v", c, err)
	}
	msg := err.Error()
	if hasPart(msg, token) {
		t.Fatalf("Verify: error text contains part of the token: %.60q", msg)
	}
	if strings.Contains(msg, "canary") {
		t.Fatalf("Verify: error text contains a claim value: %q", msg)
	}
	return c, e
}

func wantOK(t testing.TB, v *jwt.Verifier, token string) jwt.Claims {
	t.Helper()
	c, err := verify(t, v, token)
	if err != nil {
		t.Fatalf("Verify = %v, want success", err)
	}
	return c
}

func wantReason(t testing.TB, v *jwt.Verifier, token, reason string) {
	t.Helper()
	_, err := verify(t, v, token)
	if err == nil {
		t.Fatalf("Verify succeeded, want %q", reason)
	}
	if err.Reason != reason {
		t.Fatalf("Verify = %q, want %q", err.Reason, reason)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func durationpbNew(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
