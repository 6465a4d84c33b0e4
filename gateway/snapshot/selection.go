package snapshot

import (
	"slices"
	"strings"
)

// MaxProbedRoutes is how many routes of a RouteSelection a node probes.
const MaxProbedRoutes = 500

// RouteSelection selects routes of a snapshot by id: the routes a node
// is asked to probe while a change to them rolls out.
type RouteSelection struct {
	// IDs select routes by id, Prefixes the routes a service derives by
	// the start of their id, "<service id>." (see Selects), and All every
	// route.
	IDs, Prefixes []string
	All           bool
}

// Empty reports whether s selects no route.
func (s RouteSelection) Empty() bool { return !s.All && len(s.IDs) == 0 && len(s.Prefixes) == 0 }

// Selects reports whether s selects the route with id: one of IDs, or
// a route a service derives whose id starts with one of Prefixes. A
// caller that tests many ids uses a Selector, made once.
func (s RouteSelection) Selects(id string) bool { return s.Selector().Selects(id) }

// Selector returns a Selector of the routes s selects, which keeps a copy
// of s.
func (s RouteSelection) Selector() *Selector {
	ids := make(map[string]struct{}, len(s.IDs))
	for _, id := range s.IDs {
		ids[id] = struct{}{}
	}
	return &Selector{ids: ids, prefixes: slices.Clone(s.Prefixes), all: s.All}
}

// Selector is a RouteSelection made to test many ids: its ids in a set.
// It is immutable, safe for concurrent use.
type Selector struct {
	ids      map[string]struct{}
	prefixes []string
	all      bool
}

// Selects reports whether the selection selects the route with id, as
// RouteSelection.Selects does.
func (s *Selector) Selects(id string) bool {
	if s.all {
		return true
	}
	if _, ok := s.ids[id]; ok {
		return true
	}
	return selectsByPrefix(s.prefixes, id)
}

// selectsByPrefix reports whether id is that of a route a service
// derives, "<service id>.<Method>" or a binding's "<service id>.<Method>.httpN",
// whose start is one of prefixes. The rest of the id must start with an
// uppercase letter, as a method's name does and no part of a route's
// id may (route ids are lowercase): prefix "orders." selects
// orders.GetOrder, never the route orders.list.
func selectsByPrefix(prefixes []string, id string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(id, p); ok && rest != "" && 'A' <= rest[0] && rest[0] <= 'Z' {
			return true
		}
	}
	return false
}
