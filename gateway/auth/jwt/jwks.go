package jwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// key is one verification key of an issuer.
type key struct {
	kid string
	// pub is an *ecdsa.PublicKey, an *rsa.PublicKey or an
	// ed25519.PublicKey, never a []byte, so golang-jwt's HMAC methods could
	// not use it even if they were ever offered one.
	pub crypto.PublicKey
	// algs are the algorithms the key may verify: those its type fits,
	// narrowed by its alg member and by the issuer's config.
	algs algSet
}

// keySet maps kid to key. It is immutable once built.
type keySet map[string]*key

// RSA moduli outside these bounds are refused: too weak, or slow enough to
// verify that tokens naming them would be a denial of service.
const (
	minRSABits = 2048
	maxRSABits = 8192
)

// privateMembers are the JWK members (RFC 7518 section 6) that hold
// private or secret key material.
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

// parseJWKS parses a JSON Web Key Set (RFC 7517) and returns the keys that
// can verify tokens for the allowed algorithms.
//
// Keys whose use is not "sig" are skipped. Any other key that cannot be
// used (no kid, an unsupported kty or crv, an alg the issuer does not allow)
// is an error when strict, for a set pushed in config, where it is a
// mistake to point out; and is skipped otherwise, for a set fetched from an
// issuer, which may well publish keys for others. Either way a set is
// refused as a whole when it is not valid JSON, has duplicate members or
// kids, holds private key material (someone pasted a private key), or has
// a key that is broken or weak: a point off its curve, an RSA modulus under
// 2048 bits, an alg that does not fit the key.
func parseJWKS(data []byte, allowed algSet, strict bool) (keySet, int, error) {
	top, ok := parseObject(data, nil)
	if !ok {
		return nil, 0, errors.New("not a JSON object")
	}
	if duplicateName(top) {
		return nil, 0, errors.New("duplicate member")
	}
	var list []byte
	for _, m := range top {
		if string(m.name) == "keys" {
			list = m.value
		}
	}
	if list == nil {
		return nil, 0, errors.New(`no "keys" member`)
	}
	elems, ok := elements(list, nil)
	if !ok {
		return nil, 0, errors.New(`"keys" is not an array`)
	}
	set := make(keySet, len(elems))
	seen := make(map[string]bool, len(elems))
	skipped := 0
	for i, e := range elems {
		k, skip, err := parseJWK(e, allowed)
		if err != nil {
			return nil, 0, fmt.Errorf("key %d: %w", i, err)
		}
		if k.kid != "" {
			if seen[k.kid] {
				return nil, 0, fmt.Errorf("key %d: duplicate kid %q", i, k.kid)
			}
			seen[k.kid] = true
		}
		if skip != "" {
			if strict && skip != skipNotSig {
				return nil, 0, fmt.Errorf("key %d: %s", i, skip)
			}
			skipped++
			continue
		}
		set[k.kid] = k
	}
	return set, skipped, nil
}

const skipNotSig = "not a signing key"

// parseJWK parses one key. A key the issuer cannot use comes back with the
// reason in skip; a key that must fail the whole set, with err.
func parseJWK(data []byte, allowed algSet) (k *key, skip string, err error) {
	ms, ok := parseObject(data, nil)
	if !ok {
		return nil, "", errors.New("not a JSON object")
	}
	if duplicateName(ms) {
		return nil, "", errors.New("duplicate member")
	}
	jwk := make(map[string][]byte, len(ms))
	for _, m := range ms {
		jwk[string(m.name)] = m.value
	}
	for _, name := range privateMembers {
		if _, ok := jwk[name]; ok {
			return nil, "", fmt.Errorf("holds private key material (member %q): publish only the public key", name)
		}
	}
	str := func(name string) (string, error) {
		v, ok := jwk[name]
		if !ok {
			return "", nil
		}
		s, ok := stringValue(v)
		if !ok {
			return "", fmt.Errorf("%q is not a string", name)
		}
		return s, nil
	}
	k = &key{}
	if k.kid, err = str("kid"); err != nil {
		return nil, "", err
	}
	use, err := str("use")
	if err != nil {
		return nil, "", err
	}
	kty, err := str("kty")
	if err != nil {
		return nil, "", err
	}
	crv, err := str("crv")
	if err != nil {
		return nil, "", err
	}
	alg, err := str("alg")
	if err != nil {
		return nil, "", err
	}
	switch {
	case k.kid == "":
		return k, "no kid, so no token can name it", nil
	case !validKID([]byte(k.kid)):
		return k, fmt.Sprintf("kid %q is not a plain name (letters, digits, '.', '_', '-'; at most 128)", k.kid), nil
	case use != "" && use != "sig":
		return k, skipNotSig, nil
	}
	var fits algSet
	switch kty {
	case "EC":
		var curve elliptic.Curve
		switch crv {
		case "P-256":
			curve, fits = elliptic.P256(), algsEC256
		case "P-384":
			curve, fits = elliptic.P384(), algsEC384
		default:
			return k, fmt.Sprintf("kid %q: EC curve %q is not supported", k.kid, crv), nil
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := bytesMember(jwk, "x", size)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: %w", k.kid, err)
		}
		y, err := bytesMember(jwk, "y", size)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: %w", k.kid, err)
		}
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: the point is not on %s", k.kid, crv)
		}
		k.pub = pub
	case "RSA":
		fits = algsRSA
		nb, err := bytesMember(jwk, "n", 0)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: %w", k.kid, err)
		}
		eb, err := bytesMember(jwk, "e", 0)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: %w", k.kid, err)
		}
		n := new(big.Int).SetBytes(nb)
		if bits := n.BitLen(); bits < minRSABits || bits > maxRSABits {
			return nil, "", fmt.Errorf("kid %q: RSA modulus of %d bits; need %d to %d", k.kid, bits, minRSABits, maxRSABits)
		}
		if n.Bit(0) == 0 {
			return nil, "", fmt.Errorf("kid %q: RSA modulus is even", k.kid)
		}
		if len(eb) == 0 || len(eb) > 4 {
			return nil, "", fmt.Errorf("kid %q: RSA exponent out of range", k.kid)
		}
		var e int64
		for _, c := range eb {
			e = e<<8 | int64(c)
		}
		if e < 3 || e > 1<<31-1 || e%2 == 0 {
			return nil, "", fmt.Errorf("kid %q: RSA exponent %d is not an odd number from 3 to 2^31-1", k.kid, e)
		}
		k.pub = &rsa.PublicKey{N: n, E: int(e)}
	case "OKP":
		if crv != "Ed25519" {
			return k, fmt.Sprintf("kid %q: OKP curve %q is not supported", k.kid, crv), nil
		}
		fits = algsOKP
		x, err := bytesMember(jwk, "x", ed25519.PublicKeySize)
		if err != nil {
			return nil, "", fmt.Errorf("kid %q: %w", k.kid, err)
		}
		k.pub = ed25519.PublicKey(x)
	default:
		return k, fmt.Sprintf("kid %q: kty %q is not supported", k.kid, kty), nil
	}
	k.algs = fits
	if alg != "" {
		a := lookupAlg([]byte(alg))
		if a == nil {
			return k, fmt.Sprintf("kid %q: alg %q is not supported", k.kid, alg), nil
		}
		if a.set&fits == 0 {
			return nil, "", fmt.Errorf("kid %q: alg %s does not fit a %s key", k.kid, alg, kty)
		}
		k.algs = a.set
	}
	if k.algs&allowed == 0 {
		return k, fmt.Sprintf("kid %q: fits none of the issuer's algorithms (%s)", k.kid, strings.Join(allowed.names(), ", ")), nil
	}
	k.algs &= allowed
	return k, "", nil
}

// bytesMember decodes a base64url member; size, if not 0, is the exact
// length it must have (RFC 7518 requires full-length coordinates).
func bytesMember(jwk map[string][]byte, name string, size int) ([]byte, error) {
	v, ok := jwk[name]
	if !ok {
		return nil, fmt.Errorf("no %q", name)
	}
	s, ok := stringValue(v)
	if !ok {
		return nil, fmt.Errorf("%q is not a string", name)
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not unpadded base64url", name)
	}
	if size != 0 && len(b) != size {
		return nil, fmt.Errorf("%q is %d bytes, want %d", name, len(b), size)
	}
	return b, nil
}

// reuse replaces keys equal to one in old by old's, so a key that is
// published again keeps its identity and the tokens cached under it stay
// valid.
func (ks keySet) reuse(old keySet) {
	for kid, k := range ks {
		o, ok := old[kid]
		if !ok || o.algs != k.algs {
			continue
		}
		if eq, ok := o.pub.(interface{ Equal(crypto.PublicKey) bool }); ok && eq.Equal(k.pub) {
			ks[kid] = o
		}
	}
}

// MergeJWKS returns the key set of base (an issuer's jwks_json, possibly
// empty) with the published keys added; a published key replaces a base
// key of the same kid.
func MergeJWKS(base, published string) (string, error) {
	type set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	var b, p set
	if base != "" {
		if err := json.Unmarshal([]byte(base), &b); err != nil {
			return "", fmt.Errorf("jwks_json: %w", err)
		}
	}
	if err := json.Unmarshal([]byte(published), &p); err != nil {
		return "", fmt.Errorf("published keys: %w", err)
	}
	kids := map[string]bool{}
	for _, k := range p.Keys {
		if kid, ok := k["kid"]; ok {
			kids[string(kid)] = true
		}
	}
	out := set{Keys: p.Keys}
	for _, k := range b.Keys {
		if kid, ok := k["kid"]; ok && kids[string(kid)] {
			continue
		}
		out.Keys = append(out.Keys, k)
	}
	j, err := json.Marshal(out)
	return string(j), err
}
