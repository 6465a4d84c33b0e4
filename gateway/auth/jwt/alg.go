package jwt

import (
	"fmt"

	gojwt "github.com/golang-jwt/jwt/v5"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// algSet is a set of the algorithms the gateway can verify. There is no
// member for "none" or any HMAC algorithm, so no config and no key can ever
// allow them.
type algSet uint8

const (
	algES256 algSet = 1 << iota
	algES384
	algRS256
	algPS256
	algEdDSA

	algsEC256 = algES256
	algsEC384 = algES384
	algsRSA   = algRS256 | algPS256
	algsOKP   = algEdDSA
)

// algorithm ties a JOSE alg name to golang-jwt's implementation and to the
// config enum.
type algorithm struct {
	set    algSet
	name   string
	method gojwt.SigningMethod
	config configv1.JWTAlgorithm
}

var algorithms = [...]algorithm{
	{algES256, "ES256", gojwt.SigningMethodES256, configv1.JWTAlgorithm_JWT_ALGORITHM_ES256},
	{algES384, "ES384", gojwt.SigningMethodES384, configv1.JWTAlgorithm_JWT_ALGORITHM_ES384},
	{algRS256, "RS256", gojwt.SigningMethodRS256, configv1.JWTAlgorithm_JWT_ALGORITHM_RS256},
	{algPS256, "PS256", gojwt.SigningMethodPS256, configv1.JWTAlgorithm_JWT_ALGORITHM_PS256},
	{algEdDSA, "EdDSA", gojwt.SigningMethodEdDSA, configv1.JWTAlgorithm_JWT_ALGORITHM_EDDSA},
}

// lookupAlg finds a JOSE alg name among those the gateway implements.
func lookupAlg(name []byte) *algorithm {
	for i := range algorithms {
		if string(name) == algorithms[i].name {
			return &algorithms[i]
		}
	}
	return nil
}

// configAlgs turns an issuer's configured algorithms into a set; none
// configured means ES256 only.
func configAlgs(cfg []configv1.JWTAlgorithm) (algSet, error) {
	if len(cfg) == 0 {
		return algES256, nil
	}
	var set algSet
	for _, c := range cfg {
		found := false
		for _, a := range algorithms {
			if a.config == c {
				set |= a.set
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("algorithm %v is not supported", c)
		}
	}
	return set, nil
}

// names lists the set's algorithms for error messages and logs.
func (s algSet) names() []string {
	var out []string
	for _, a := range algorithms {
		if s&a.set != 0 {
			out = append(out, a.name)
		}
	}
	return out
}
