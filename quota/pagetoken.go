package quota

import (
	"encoding/base64"
	"errors"
	"strings"

	"github.com/portico-gw/portico/quota/store"
)

// A ListUsage page token is the last key of the page, with the query it
// pages through (period and tenant), so that a token is refused by
// another query rather than paging it from a wrong place. It is opaque
// to clients: base64url of "v1", period, tenant, subject, product,
// separated by NUL (which no field holds: the store's keys come from
// validated windows, whose fields are printable).
const pageTokenVersion = "v1"

func pageToken(period, tenant string, last store.Key) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(
		[]string{pageTokenVersion, period, tenant, last.Subject, last.Product}, "\x00")))
}

var errPageToken = errors.New("the page token is not one of this query's (period and tenant)")

func parsePageToken(token, period, tenant string) (store.Key, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return store.Key{}, errPageToken
	}
	f := strings.Split(string(b), "\x00")
	if len(f) != 5 || f[0] != pageTokenVersion || f[1] != period || f[2] != tenant || f[3] == "" {
		return store.Key{}, errPageToken
	}
	return store.Key{Subject: f[3], Product: f[4], Period: period}, nil
}
