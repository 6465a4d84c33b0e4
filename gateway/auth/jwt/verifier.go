package jwt

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/denyentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// DefaultMaxTokenLifetime is an issuer's max_token_lifetime when it sets
// none, before its leeway is added: the seed's access-token lifetime.
const DefaultMaxTokenLifetime = 15 * time.Minute

// Defaults for unset Issuer fields, as config.proto documents them.
const (
	defaultLeeway        = 30 * time.Second
	defaultMaxTokenBytes = 8 << 10
	defaultPlanClaim     = "plan"
	defaultTenantClaim   = "tenant"
	defaultRefresh       = 5 * time.Minute
	defaultMinRefresh    = 30 * time.Second
)

// Options configure a Verifier. The zero value works.
type Options struct {
	// Now tells the time for exp, nbf, iat, deny entries and cache
	// lifetimes; nil means time.Now. Fetch schedules use the real clock.
	Now func() time.Time
	// Logger gets fetch failures (warn) and housekeeping (debug); nil
	// means slog.Default(). Nothing logged contains any part of a token.
	Logger *slog.Logger
	// HTTPClient fetches jwks_url key sets; nil means a client with 5 s
	// timeouts that verifies TLS. Either way redirects are refused.
	HTTPClient *http.Client
	// CacheSize bounds the verified-token cache, in entries; 0 means
	// 65536, negative turns the cache off.
	CacheSize int
}

// Verifier verifies access tokens. It is safe for concurrent use.
//
// Its lifecycle:
//  1. New makes one; it refuses every token until the first Update.
//  2. Update installs each new snapshot's issuers and deny list. It parses
//     and checks everything first and changes nothing on error; then it
//     starts fetchers for issuers with a jwks_url and stops those of
//     issuers that went away or changed. (Prepare and Install are its
//     two halves, for a caller that publishes the set with more state of
//     its own: Prepare builds an Issuers set, which VerifyWith can use at
//     once; Install makes it the one the next Prepare builds on, or
//     Discard drops it.)
//  3. Verify checks a token on the request path against the installed
//     set, VerifyWith against a given one: neither blocks on the network
//     or on Update.
//  4. Close stops the fetchers. Verify keeps answering from the last
//     snapshot; Update fails.
type Verifier struct {
	now    func() time.Time
	log    *slog.Logger
	client *http.Client
	cache  *cache // nil when off

	installed atomic.Pointer[Issuers]

	mu     sync.Mutex // serialises Prepare, Install, Discard and Close
	closed bool
}

// Issuers is one set of issuers and deny entries, built by Prepare and
// immutable once built. A request verifies its token against the one set
// its snapshot holds.
type Issuers struct {
	byIss  map[string]*issuer // by the exact iss claim
	byName map[string]*issuer // by Issuer.name
	// maxTokenBytes is the largest of the issuers' limits: the bound
	// before a token names its issuer.
	maxTokenBytes int
	deny          *denyList
	// started are the fetchers Prepare started for this set, which
	// Discard stops if the set is never installed.
	started []*fetcher
}

// issuer returns the issuer named name, if st has one; st may be nil.
func (st *Issuers) issuer(name string) *issuer {
	if st == nil {
		return nil
	}
	return st.byName[name]
}

// issuer is one compiled Issuer config. Update keeps the same *issuer for
// an unchanged config, so the tokens cached under it stay valid.
type issuer struct {
	cfg    *configv1.Issuer
	name   string
	iss    string
	algs   algSet
	leeway time.Duration
	// maxLifetime is max_token_lifetime, or DefaultMaxTokenLifetime plus
	// leeway; maxLifetimeSec the same in seconds, for the claims' floats.
	maxLifetime    time.Duration
	maxLifetimeSec float64
	maxTokenBytes  int
	tenantClaim    string
	planClaim      string
	defaultPlan    string
	validator      *gojwt.Validator
	pushed         keySet
	fetchCfg       fetchConfig // zero without jwks_url
	fetch          *fetcher    // nil without jwks_url
}

// key returns the key published under kid: jwks_json's first, then the
// fetched ones.
func (is *issuer) key(kid string) *key {
	if k := is.pushed[kid]; k != nil {
		return k
	}
	if is.fetch != nil {
		if ks := is.fetch.keys.Load(); ks != nil {
			return (*ks)[kid]
		}
	}
	return nil
}

// New returns a Verifier that refuses every token until its first Update.
func New(opts Options) *Verifier {
	v := &Verifier{
		now:    opts.Now,
		log:    opts.Logger,
		client: httpClient(opts.HTTPClient),
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	switch {
	case opts.CacheSize == 0:
		v.cache = newCache(defaultCacheSize)
	case opts.CacheSize > 0:
		v.cache = newCache(opts.CacheSize)
	}
	return v
}

// Update installs the issuers and deny entries of a new snapshot, which
// protovalidate has already checked. It parses every jwks_json; on any
// error it changes nothing and the error names the issuer and the problem.
// An issuer whose config is unchanged keeps everything, including keys
// fetched from its jwks_url and the tokens verified with them.
func (v *Verifier) Update(issuers []*configv1.Issuer, deny []*configv1.DenyEntry) error {
	next, err := v.Prepare(issuers, deny)
	if err != nil {
		return err
	}
	v.Install(next)
	return nil
}

// Prepare builds the set of issuers and deny entries Update would
// install, on the installed one: an issuer whose config is unchanged is
// the same, with its fetched keys and the tokens verified with them. It
// starts the fetchers of new or changed issuers (a fetcher whose config
// is unchanged carries over), so the set works at once; Install or
// Discard must follow. On error nothing has changed.
func (v *Verifier) Prepare(issuers []*configv1.Issuer, deny []*configv1.DenyEntry) (*Issuers, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, errors.New("jwt: update after close")
	}
	old := v.installed.Load()
	next := &Issuers{
		byIss:         make(map[string]*issuer, len(issuers)),
		byName:        make(map[string]*issuer, len(issuers)),
		maxTokenBytes: defaultMaxTokenBytes,
	}
	for i, cfg := range issuers {
		if cfg == nil {
			return nil, fmt.Errorf("jwt: issuer %d: nil", i)
		}
		name := cfg.GetName()
		if next.byName[name] != nil {
			return nil, fmt.Errorf("jwt: issuer %q: name used twice", name)
		}
		if other := next.byIss[cfg.GetIssuer()]; other != nil {
			return nil, fmt.Errorf("jwt: issuer %q: iss %q is also issuer %q's", name, cfg.GetIssuer(), other.name)
		}
		is := old.issuer(name)
		if is == nil || !proto.Equal(is.cfg, cfg) {
			var err error
			if is, err = v.compile(cfg); err != nil {
				return nil, fmt.Errorf("jwt: issuer %q: %w", name, err)
			}
		}
		next.byName[name] = is
		next.byIss[is.iss] = is
		if i == 0 || is.maxTokenBytes > next.maxTokenBytes {
			next.maxTokenBytes = is.maxTokenBytes
		}
	}
	var err error
	if next.deny, err = newDenyList(deny, v.now(), next.byName); err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}

	// Everything checked: from here on nothing fails. Fetchers whose
	// config is unchanged carry over, even to a changed issuer.
	for _, is := range next.byName {
		if is.fetchCfg.url == "" || is.fetch != nil {
			continue
		}
		// A new or changed issuer.
		if prev := old.issuer(is.name); prev != nil && prev.fetchCfg == is.fetchCfg {
			is.fetch = prev.fetch
		} else {
			is.fetch = startFetcher(is.fetchCfg, v.client, v.log)
			next.started = append(next.started, is.fetch)
		}
	}
	v.log.Debug("jwt: issuers prepared", "issuers", len(next.byName), "deny_entries", len(deny))
	return next, nil
}

// Install makes next, from Prepare, the set Verify uses and the next
// Prepare builds on, and stops the fetchers of the set it replaces that
// next does not use.
func (v *Verifier) Install(next *Issuers) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.installed.Swap(next)
	if v.closed {
		stopUnused(next.fetchers(), nil)
		return
	}
	stopUnused(old.fetchers(), next)
}

// Discard drops next, from Prepare, which will not be installed: it
// stops the fetchers Prepare started for it alone.
func (v *Verifier) Discard(next *Issuers) {
	v.mu.Lock()
	defer v.mu.Unlock()
	stopUnused(next.started, v.installed.Load())
}

// fetchers lists the fetchers set's issuers use; set may be nil.
func (set *Issuers) fetchers() []*fetcher {
	if set == nil {
		return nil
	}
	var out []*fetcher
	for _, is := range set.byName {
		if is.fetch != nil {
			out = append(out, is.fetch)
		}
	}
	return out
}

// stopUnused stops each of fs that keep, which may be nil, does not use.
func stopUnused(fs []*fetcher, keep *Issuers) {
	used := make(map[*fetcher]bool)
	for _, f := range keep.fetchers() {
		used[f] = true
	}
	for _, f := range fs {
		if !used[f] {
			f.stop()
		}
	}
}

// CheckIssuer reports whether Update would accept cfg (its keys, their
// algorithms, its settings), without changing anything.
func (v *Verifier) CheckIssuer(cfg *configv1.Issuer) error {
	_, err := v.compile(cfg)
	return err
}

// compile checks one issuer's config and builds everything Verify needs,
// short of starting its fetcher.
func (v *Verifier) compile(cfg *configv1.Issuer) (*issuer, error) {
	is := &issuer{
		cfg:           proto.Clone(cfg).(*configv1.Issuer),
		name:          cfg.GetName(),
		iss:           cfg.GetIssuer(),
		leeway:        defaultLeeway,
		maxTokenBytes: defaultMaxTokenBytes,
		tenantClaim:   cfg.GetTenantClaim(),
		planClaim:     cfg.GetPlanClaim(),
		defaultPlan:   cfg.GetDefaultPlan(),
	}
	if is.iss == "" {
		return nil, errors.New("no issuer (iss)")
	}
	if len(cfg.GetAudiences()) == 0 {
		return nil, errors.New("no audiences")
	}
	var err error
	if is.algs, err = configAlgs(cfg.GetAlgorithms()); err != nil {
		return nil, err
	}
	if d := cfg.GetLeeway(); d != nil {
		is.leeway = d.AsDuration()
	}
	is.maxLifetime = DefaultMaxTokenLifetime + is.leeway
	if d := cfg.GetMaxTokenLifetime(); d != nil {
		is.maxLifetime = d.AsDuration()
	}
	// config.proto bounds both, and the fast lane and the key service keep
	// deny entries only as long as those bounds make necessary
	// (gateway/denyentry): a config past them would let a token outlive
	// its revocation.
	if is.leeway < 0 || is.leeway > denyentry.MaxLeeway {
		return nil, fmt.Errorf("leeway must be between 0 and %s", denyentry.MaxLeeway)
	}
	if is.maxLifetime <= 0 || is.maxLifetime > denyentry.MaxLifetime {
		return nil, fmt.Errorf("max_token_lifetime must be positive and at most %s", denyentry.MaxLifetime)
	}
	is.maxLifetimeSec = is.maxLifetime.Seconds()
	if n := cfg.GetMaxTokenBytes(); n != 0 {
		is.maxTokenBytes = int(n)
	}
	if is.tenantClaim == "" {
		is.tenantClaim = defaultTenantClaim
	}
	if is.planClaim == "" {
		is.planClaim = defaultPlanClaim
	}
	if cfg.GetJwksJson() == "" && cfg.GetJwksUrl() == "" {
		return nil, errors.New("no keys: set jwks_json or jwks_url")
	}
	if j := cfg.GetJwksJson(); j != "" {
		if is.pushed, _, err = parseJWKS([]byte(j), is.algs, true); err != nil {
			return nil, fmt.Errorf("jwks_json: %w", err)
		}
		if len(is.pushed) == 0 && cfg.GetJwksUrl() == "" {
			return nil, errors.New("jwks_json: no signing keys")
		}
	}
	if raw := cfg.GetJwksUrl(); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, errors.New("jwks_url: must be an https URL")
		}
		is.fetchCfg = fetchConfig{
			issuer:     is.name,
			url:        raw,
			refresh:    defaultRefresh,
			minRefresh: defaultMinRefresh,
			algs:       is.algs,
		}
		if d := cfg.GetJwksRefresh(); d != nil {
			is.fetchCfg.refresh = d.AsDuration()
		}
		if d := cfg.GetJwksMinRefresh(); d != nil {
			is.fetchCfg.minRefresh = d.AsDuration()
		}
		if is.fetchCfg.refresh <= 0 || is.fetchCfg.minRefresh <= 0 {
			return nil, errors.New("jwks_refresh and jwks_min_refresh must be positive")
		}
	}
	is.validator = gojwt.NewValidator(
		gojwt.WithIssuer(is.iss),
		gojwt.WithAudience(cfg.GetAudiences()...),
		gojwt.WithExpirationRequired(),
		gojwt.WithIssuedAt(),
		gojwt.WithLeeway(is.leeway),
		gojwt.WithTimeFunc(v.now),
	)
	return is, nil
}

// Verify checks a token, the compact JWS without "Bearer ", and returns
// its claims. Every refusal is an *Error. It never blocks: an unknown kid
// is refused at once, and the issuer's jwks_url, if any, fetched in the
// background.
func (v *Verifier) Verify(token string) (Claims, error) {
	return v.VerifyWith(v.installed.Load(), token)
}

// VerifyWith is Verify against set, from Prepare (nil refuses every
// token), whether or not it is installed.
func (v *Verifier) VerifyWith(set *Issuers, token string) (Claims, error) {
	st := set
	if st == nil {
		return Claims{}, refuse(reasonNotConfigured)
	}
	if len(token) > st.maxTokenBytes {
		return Claims{}, refuse(reasonTooLarge)
	}
	s := getScratch()
	defer putScratch(s)
	s.token = append(s.token[:0], token...)
	now := v.now()

	var sum [sha256.Size]byte
	if v.cache != nil {
		sum = sha256.Sum256(s.token)
		if e := v.cache.get(&sum); e != nil {
			switch {
			case now.UnixNano() >= e.until || st.byName[e.claims.Issuer] != e.iss || e.iss.key(e.key.kid) != e.key:
				// Lapsed, or its issuer or key changed: verify afresh,
				// which decides.
				v.cache.remove(&sum, e)
			case st.deny.denies(e.claims.Issuer, &e.claims, e.iat, e.hasIat, now):
				return Claims{}, &Error{Reason: reasonRevoked, Issuer: e.claims.Issuer}
			default:
				return e.claims, nil
			}
		}
	}

	p, reason := preparse(token, s)
	if reason != "" {
		return Claims{}, refuse(reason)
	}
	is := st.byIss[string(p.iss)]
	if is == nil {
		return Claims{}, refuse(reasonUnknownIssuer)
	}
	if len(token) > is.maxTokenBytes {
		return Claims{}, is.refuse(reasonTooLarge)
	}
	// The issuer's config, not the token, decides which algorithms count.
	a := lookupAlg(p.alg)
	if a == nil || a.set&is.algs == 0 {
		return Claims{}, is.refuse(reasonAlgNotAllowed)
	}
	k := is.key(string(p.kid))
	if k == nil {
		if is.fetch != nil {
			is.fetch.kick()
		}
		return Claims{}, is.refuse(reasonUnknownKID)
	}
	if k.algs&a.set == 0 {
		return Claims{}, is.refuse(reasonAlgKeyMismatch)
	}
	if err := a.method.Verify(p.signingInput, p.sig, k.pub); err != nil {
		return Claims{}, is.refuse(reasonBadSignature)
	}

	c, reason := decodeClaims(p.claims, is, &s.elems)
	if reason != "" {
		return Claims{}, is.refuse(reason)
	}
	if err := is.validator.Validate(c); err != nil {
		return Claims{}, is.refuse(claimsReason(c, err))
	}
	if is.tooLong(c, now) {
		return Claims{}, is.refuse(reasonTooLong)
	}
	claims := c.claims(is)
	if st.deny.denies(is.name, &claims, c.iatSec, c.hasIat, now) {
		return Claims{}, is.refuse(reasonRevoked)
	}
	if v.cache != nil {
		until := now.Add(cacheTTL)
		if t := c.exp.Time.Add(is.leeway); t.Before(until) {
			until = t
		}
		v.cache.put(&sum, &entry{
			claims: claims,
			iss:    is,
			key:    k,
			iat:    c.iatSec,
			hasIat: c.hasIat,
			until:  until.UnixNano(),
		})
	}
	return claims, nil
}

func (is *issuer) refuse(reason string) *Error { return &Error{Reason: reason, Issuer: is.name} }

// tooLong reports whether a token lives longer than the issuer allows:
// exp - iat, or, without iat, exp - now. A deny entry lasts only as long
// as the longest lifetime, so a token that lived longer would work again
// once its entry lapsed. A token without iat can be accepted later, once
// its exp is near enough.
func (is *issuer) tooLong(c *tokenClaims, now time.Time) bool {
	from := c.iatSec
	if !c.hasIat {
		from = float64(now.UnixNano()) / 1e9
	}
	return c.expSec-from > is.maxLifetimeSec
}

// Close stops the fetchers and waits for them. Verify keeps working with
// the keys it has.
func (v *Verifier) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.closed = true
	stopUnused(v.installed.Load().fetchers(), nil)
	v.client.CloseIdleConnections()
}
