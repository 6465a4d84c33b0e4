//go:build race

package gobuild

const race = true
