package apikey_test

import (
	"crypto/rand"
	"testing"

	"github.com/portico-gw/portico/gateway/apikey"
)

var (
	sinkEnv  apikey.Env
	sinkErr  error
	sinkHash [32]byte
)

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkEnv, sinkErr = apikey.Parse(goldenLive)
	}
}

// BenchmarkParseMalformed is the cheapest refusal: a string of the wrong
// length.
func BenchmarkParseMalformed(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkEnv, sinkErr = apikey.Parse("Bearer eyJhbGciOiJFUzI1NiJ9")
	}
}

func BenchmarkParseBadChecksum(b *testing.B) {
	key := goldenLive[:40] + "000000"
	b.ReportAllocs()
	for b.Loop() {
		sinkEnv, sinkErr = apikey.Parse(key)
	}
}

func BenchmarkHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkHash = apikey.Hash(goldenLive)
	}
}

func BenchmarkParseHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkEnv, sinkErr = apikey.Parse(goldenLive)
		sinkHash = apikey.Hash(goldenLive)
	}
}

func BenchmarkGenerate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := apikey.Generate(apikey.Live, rand.Reader); err != nil {
			b.Fatal(err)
		}
	}
}
