// Package apikey defines Portico's API key format: generating keys, checking
// them before any lookup, hashing them for storage, and the part of a key that
// may be shown.
//
// A key is an environment prefix, a random body and a checksum:
//
//	ak_live_ | 32 body characters | 6 checksum characters    (46 bytes, no '|')
//
// The prefix is "ak_live_" or "ak_test_". The body's 32 characters from
// [0-9A-Za-z] carry about 190 bits of entropy. The checksum is the CRC-32
// (IEEE) of the prefix and body, written as six base62 digits, most
// significant first, padded with '0'. Every key is Len bytes long and matches
// ak_(live|test)_[0-9A-Za-z]{38}, so secret scanners can find keys in text and
// confirm them by the checksum with few false positives, and the gateway can
// refuse a mistyped or truncated key without hashing it.
//
// Keys are stored and compared only as Hash(key). The package does no I/O and
// keeps no state; everything in it is safe for concurrent use.
package apikey

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Env is the environment a key belongs to, named by its prefix.
type Env uint8

const (
	// Live keys ("ak_live_") call production.
	Live Env = iota + 1
	// Test keys ("ak_test_") call sandboxes.
	Test
)

// String returns "live" or "test".
func (e Env) String() string {
	switch e {
	case Live:
		return "live"
	case Test:
		return "test"
	}
	return "Env(" + strconv.Itoa(int(e)) + ")"
}

// prefix returns the key prefix of e, or "" if e is not an environment.
func (e Env) prefix() string {
	switch e {
	case Live:
		return livePrefix
	case Test:
		return testPrefix
	}
	return ""
}

// Len is the length of every key in bytes.
const Len = prefixLen + bodyLen + sumLen

const (
	livePrefix = "ak_live_"
	testPrefix = "ak_test_"
	prefixLen  = len(livePrefix)
	bodyLen    = 32
	sumLen     = 6
	sumAt      = prefixLen + bodyLen // offset of the checksum

	// displayLen is what DisplayPrefix shows: the prefix and 4 body
	// characters, 24 of the body's 190 bits.
	displayLen = prefixLen + 4
)

// Generate's own errors.
var (
	errEnv   = errors.New("apikey: unknown environment")
	errStuck = errors.New("apikey: random source yields only bytes above 247")
)

// maxRead bounds the bytes Generate reads for one key, so that a broken
// source (all 0xff, say) fails instead of looping forever. A random source
// needs 33 bytes on average; the chance that it needs 1024 is below 10^-1000.
const maxRead = 1024

// Generate returns a new key for env with a body of 32 characters drawn
// uniformly from rand, which must be crypto/rand.Reader outside tests. It
// returns rand's error, wrapped, if reading fails.
func Generate(env Env, rand io.Reader) (string, error) {
	p := env.prefix()
	if p == "" {
		return "", errEnv
	}
	var k [Len]byte
	copy(k[:], p)
	// Rejection sampling: a byte below 248 = 4·62 maps to a digit by its
	// remainder, each digit from exactly four byte values; a byte of 248 or
	// above is dropped. Each round reads only as many bytes as characters
	// are still missing (31/32 of them on average are kept).
	var buf [bodyLen]byte
	n := prefixLen
	for read := 0; n < sumAt; {
		if read >= maxRead {
			return "", errStuck
		}
		r := buf[:sumAt-n]
		if _, err := io.ReadFull(rand, r); err != nil {
			return "", fmt.Errorf("apikey: reading random bytes: %w", err)
		}
		read += len(r)
		for _, b := range r {
			if b < 248 {
				k[n] = alphabet[b%62]
				n++
			}
		}
	}
	crc, _ := scan(string(k[:]))
	putChecksum(k[sumAt:], crc)
	return string(k[:]), nil
}

// Parse checks that key is well formed: its length, prefix, alphabet and
// checksum, in that order, and returns its environment. It does not say
// whether the key exists. The error is always an *Error, which never holds
// any part of key; it matches ErrFormat or ErrChecksum with errors.Is.
// Parse does not allocate.
func Parse(key string) (Env, error) {
	if len(key) != Len {
		return 0, errLength
	}
	var env Env
	switch key[:prefixLen] {
	case livePrefix:
		env = Live
	case testPrefix:
		env = Test
	default:
		return 0, errPrefix
	}
	// One pass over the body for the CRC and the alphabet, then the
	// checksum digits; a bad byte anywhere wins over a checksum mismatch.
	crc, bad := scan(key)
	var sum uint64
	for i := sumAt; i < Len; i++ {
		d := digits[key[i]]
		bad |= d
		sum = sum*62 + uint64(d)
	}
	if bad < 0 {
		return 0, errAlphabet
	}
	// 62^6 > 2^32, so some well-formed digit strings exceed any CRC-32;
	// comparing as uint64 rejects them too.
	if sum != uint64(crc) {
		return 0, errChecksum
	}
	return env, nil
}

// Hash returns the SHA-256 of key, the only form in which keys are stored
// and looked up. It does not allocate for strings of up to Len bytes.
func Hash(key string) [sha256.Size]byte {
	if len(key) > Len {
		return sha256.Sum256([]byte(key))
	}
	// A stack copy, so that the []byte conversion does not escape.
	var b [Len]byte
	n := copy(b[:], key)
	return sha256.Sum256(b[:n])
}

// DisplayPrefix returns the part of key that may be shown in portals and
// logs: its prefix and the first 4 body characters, such as "ak_live_Ab3x".
// It returns "" for a string that is not Len bytes long, lacks a known prefix
// or has a byte outside the alphabet among those shown, so that nothing of an
// arbitrary string (another kind of secret, say) is ever shown. It does not
// allocate.
func DisplayPrefix(key string) string {
	if len(key) != Len || (key[:prefixLen] != livePrefix && key[:prefixLen] != testPrefix) {
		return ""
	}
	for i := prefixLen; i < displayLen; i++ {
		if digits[key[i]] < 0 {
			return ""
		}
	}
	return key[:displayLen]
}
