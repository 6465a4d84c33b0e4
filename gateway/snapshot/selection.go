package snapshot

import (
	"slices"
	"strings"
)

// RouteSelection selects routes of a snapshot by id: the routes a node
// is asked to probe while a change to them rolls out.
type RouteSelection struct {
	// IDs select routes by id, Prefixes by the start of their id (the
	// routes a service derives share "<service id>."), and All every
	// route.
	IDs, Prefixes []string
	All           bool
}

// Empty reports whether s selects no route.
func (s RouteSelection) Empty() bool { return !s.All && len(s.IDs) == 0 && len(s.Prefixes) == 0 }

// Selects reports whether s selects the route with id.
func (s RouteSelection) Selects(id string) bool {
	if s.All || slices.Contains(s.IDs, id) {
		return true
	}
	return slices.ContainsFunc(s.Prefixes, func(p string) bool { return strings.HasPrefix(id, p) })
}
