// Package compile turns the control plane's config (every team's routes,
// clusters and services, and the platform's objects) into the snapshot
// every node runs, and refuses it with every problem listed when it is
// not fit to run.
//
// It checks what only the control plane knows: which team owns which
// hosts and path prefixes, and whose clusters are whose. Everything a node
// checks itself (the schema, overlapping and ambiguous routes, auth,
// scopes, plans, issuers, timeouts, RE2, descriptors) it leaves to
// gateway/snapshot, the same code the node runs, so the control plane
// refuses exactly what a node would NACK. Problems are reported with paths
// in the config teams write ("team orders: routes[get-order].cluster"),
// not in the snapshot.
//
// The same Config always compiles to the same bytes: teams, objects and
// platform lists are sorted by name, and the snapshot is marshalled
// deterministically, so its SHA-256 names the version's content.
package compile

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/snapshot"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Result is a compiled config.
type Result struct {
	// Snapshot is the snapshot to distribute, its version and sha256 set.
	Snapshot *configv1.Snapshot
	// Bytes is Snapshot deterministically marshalled without its sha256
	// field; SHA256 is their hex SHA-256, the snapshot's digest, which is
	// also Snapshot.Sha256.
	Bytes  []byte
	SHA256 string
	// Compiled is the snapshot as a node holds it.
	Compiled *snapshot.Snapshot
}

// Error is a refused config: every problem found.
type Error struct {
	Violations []Violation
}

// Violation is one problem, as the node's compiler reports them; Path
// locates it in the config ("team orders: routes[get-order].hosts[0]"),
// empty for the config as a whole.
type Violation = snapshot.Violation

func (e *Error) Error() string {
	parts := make([]string, 0, min(len(e.Violations), 20))
	for i, v := range e.Violations {
		if i == 20 {
			parts = append(parts, "and "+strconv.Itoa(len(e.Violations)-20)+" more")
			break
		}
		parts = append(parts, v.String())
	}
	return "config refused: " + strings.Join(parts, "; ")
}

func (e *Error) add(path, format string, args ...any) {
	e.Violations = append(e.Violations, Violation{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Compile compiles cfg into the snapshot named version. It returns *Error
// when cfg is refused; any other error is the compiler's own failure.
// cfg is not modified.
//
// Every problem is listed at once: the schema's, the control plane's own
// (ownership, clusters) and the node compiler's (overlaps, auth, scopes,
// descriptors, ...). Only a config that breaks the schema is not given to
// the node's compiler, which would repeat those problems in other words.
func Compile(cfg *adminv1.Config, version string) (*Result, error) {
	errs := &Error{}
	cfg = withTeams(cfg, errs)
	schemaOK := true
	if err := protovalidate.Validate(cfg); err != nil {
		schemaOK = false
		var verr *protovalidate.ValidationError
		if !errors.As(err, &verr) {
			return nil, fmt.Errorf("compile: validating the config: %w", err)
		}
		for _, v := range verr.Violations {
			errs.add(protovalidate.FieldPathString(v.Proto.GetField()), "%s", v.Proto.GetMessage())
		}
	}
	teams := checkTeams(cfg, errs)
	up := &upstreams{rules: compileUpstreams(cfg, errs), identities: compileIdentities(cfg, errs)}
	snap, origins := assemble(cfg, teams, up, version, errs)
	if !schemaOK {
		return nil, errs
	}
	compiled, err := snapshot.Compile(snap)
	if err != nil {
		var serr *snapshot.Error
		if !errors.As(err, &serr) {
			return nil, fmt.Errorf("compile: %w", err)
		}
		for _, v := range serr.Violations {
			errs.add(origins.translate(v.Path), "%s", v.Message)
		}
		return nil, errs
	}
	if len(errs.Violations) > 0 {
		return nil, errs
	}
	// Routes derived from services exist only once compiled: their
	// ownership is checked on the compiled snapshot, one problem per
	// service listing its routes outside.
	outside := map[int]*Error{}
	for _, r := range compiled.Routes {
		if r.RPC == nil {
			continue
		}
		i := r.RPC.Service.Index
		src := snap.GetServices()[i]
		if outside[i] == nil {
			outside[i] = &Error{}
		}
		checkOwned(teams[src.GetTeam()], src.GetHosts(), r.Path, "", strconv.Quote(r.Path), outside[i])
	}
	for i, src := range snap.GetServices() {
		if e := outside[i]; e != nil && len(e.Violations) > 0 {
			msgs := make([]string, len(e.Violations))
			for j, v := range e.Violations {
				msgs[j] = v.Message
			}
			errs.add("team "+src.GetTeam()+": services["+src.GetId()+"]", "%d routes of the service are outside the team's space: %s",
				len(msgs), strings.Join(msgs, "; "))
		}
	}
	if len(errs.Violations) > 0 {
		return nil, errs
	}
	// The bytes leave the sha256 field out: they are what the digest is
	// of (see gateway/snapshot), so their SHA-256 is the snapshot's name
	// wherever it is stored or sent, and a node checks it by hashing them.
	// The compiler made them already.
	snap.Sha256 = compiled.SHA256
	return &Result{Snapshot: snap, Bytes: compiled.Encoded(), SHA256: compiled.SHA256, Compiled: compiled}, nil
}

// withTeams returns a copy of cfg in which every route and service names
// the team whose config holds it (teams may leave the field empty), and
// reports those that name another team.
func withTeams(cfg *adminv1.Config, errs *Error) *adminv1.Config {
	cfg = proto.CloneOf(cfg)
	for _, tc := range cfg.GetTeamConfigs() {
		team := tc.GetTeam()
		prefix := "team " + team + ": "
		for _, r := range tc.GetRoutes() {
			if r.GetTeam() != "" && r.GetTeam() != team {
				errs.add(prefix+"routes["+r.GetId()+"].team", "the route says team %q in team %q's config", r.GetTeam(), team)
			}
			r.Team = team
		}
		for _, s := range tc.GetServices() {
			if s.GetTeam() != "" && s.GetTeam() != team {
				errs.add(prefix+"services["+s.GetId()+"].team", "the service says team %q in team %q's config", s.GetTeam(), team)
			}
			s.Team = team
		}
	}
	return cfg
}

// checkTeams checks the teams and returns them by name.
func checkTeams(cfg *adminv1.Config, errs *Error) map[string]*adminv1.Team {
	teams := map[string]*adminv1.Team{}
	type owner struct {
		team string
		o    *adminv1.Ownership
	}
	var owned []owner
	for i, t := range cfg.GetTeams() {
		if teams[t.GetName()] != nil {
			errs.add("teams["+strconv.Itoa(i)+"].name", "team %q is declared twice", t.GetName())
			continue
		}
		teams[t.GetName()] = t
		for j, o := range t.GetOwns() {
			path := "teams[" + t.GetName() + "].owns[" + strconv.Itoa(j) + "]"
			if p := o.GetPathPrefix(); p != "/" && strings.HasSuffix(p, "/") {
				errs.add(path+".path_prefix", "%q ends with \"/\": a prefix ends at a segment boundary by itself", p)
			}
			if strings.ContainsAny(o.GetPathPrefix(), "{}*:") {
				errs.add(path+".path_prefix", "%q is not a literal path", o.GetPathPrefix())
			}
			for _, other := range owned {
				// An ownership of every host (empty host) overlaps every
				// host's.
				if other.team == t.GetName() || (other.o.GetHost() != o.GetHost() && other.o.GetHost() != "" && o.GetHost() != "") {
					continue
				}
				if covers(other.o.GetPathPrefix(), o.GetPathPrefix()) || covers(o.GetPathPrefix(), other.o.GetPathPrefix()) {
					errs.add(path, "host %q path %q overlaps team %q's %q: a route there would have two owners",
						o.GetHost(), o.GetPathPrefix(), other.team, other.o.GetPathPrefix())
				}
			}
			owned = append(owned, owner{t.GetName(), o})
		}
	}
	return teams
}

// origins maps the snapshot's objects back to where teams declared them.
type origins struct {
	routes, clusters, services []string // by snapshot index: "team orders: routes[get-order]"
}

var snapshotPath = regexp.MustCompile(`^(routes|clusters|services)\[(\d+)\](.*)$`)

// translate rewrites a snapshot field path into the config's terms.
func (o *origins) translate(path string) string {
	m := snapshotPath.FindStringSubmatch(path)
	if m == nil {
		if path == "" {
			return ""
		}
		return "platform: " + path
	}
	i, _ := strconv.Atoi(m[2])
	var list []string
	switch m[1] {
	case "routes":
		list = o.routes
	case "clusters":
		list = o.clusters
	default:
		list = o.services
	}
	if i < len(list) {
		return list[i] + m[3]
	}
	return path
}

// upstreams are the platform's grants of backends: each team's upstream
// rules, and the identities by name.
type upstreams struct {
	rules      map[string][]*upstreamRule
	identities map[string]*adminv1.UpstreamIdentity
}

// assemble builds the snapshot of cfg: every team's objects sorted by
// id, the platform's lists by name. It checks that objects belong to a
// declared team, that clusters have one owner, are used by it only and
// reach only the team's upstreams, and that hand-written routes lie in
// their team's space.
func assemble(cfg *adminv1.Config, teams map[string]*adminv1.Team, up *upstreams, version string, errs *Error) (*configv1.Snapshot, *origins) {
	snap := &configv1.Snapshot{Version: version}
	org := &origins{}
	seenTeam := map[string]bool{}
	clusterOwner := map[string]string{}
	tcs := slices.Clone(cfg.GetTeamConfigs())
	slices.SortStableFunc(tcs, func(a, b *adminv1.TeamConfig) int { return cmp.Compare(a.GetTeam(), b.GetTeam()) })

	// Clusters first: routes are checked against their owners.
	for _, tc := range tcs {
		team := tc.GetTeam()
		prefix := "team " + team + ": "
		if teams[team] == nil {
			errs.add("team "+team, "no such team: a platform admin declares teams first")
			continue
		}
		if seenTeam[team] {
			errs.add("team "+team, "the team's config is given twice")
			continue
		}
		seenTeam[team] = true
		for _, c := range sortedBy(tc.GetClusters(), (*configv1.Cluster).GetName) {
			if owner, taken := clusterOwner[c.GetName()]; taken {
				errs.add(prefix+"clusters["+c.GetName()+"]", "cluster %q is already declared by team %q", c.GetName(), owner)
				continue
			}
			clusterOwner[c.GetName()] = team
			path := prefix + "clusters[" + c.GetName() + "]"
			snap.Clusters = append(snap.Clusters, checkCluster(c, team, path, up.rules[team], up.identities, errs))
			org.clusters = append(org.clusters, path)
		}
	}
	useCluster := func(path, team, cluster string) {
		if owner, ok := clusterOwner[cluster]; ok && owner != team {
			errs.add(path+".cluster", "cluster %q belongs to team %q", cluster, owner)
		}
		// An unknown cluster is the snapshot compiler's to report.
	}
	for _, tc := range tcs {
		team := tc.GetTeam()
		if teams[team] == nil || !seenTeam[team] {
			continue
		}
		prefix := "team " + team + ": "
		for _, r := range sortedBy(tc.GetRoutes(), (*configv1.Route).GetId) {
			path := prefix + "routes[" + r.GetId() + "]"
			useCluster(path, team, r.GetCluster())
			checkOwned(teams[team], r.GetHosts(), r.GetPath(), path, "path "+strconv.Quote(r.GetPath()), errs)
			snap.Routes = append(snap.Routes, r)
			org.routes = append(org.routes, path)
		}
		for _, s := range sortedBy(tc.GetServices(), (*configv1.Service).GetId) {
			path := prefix + "services[" + s.GetId() + "]"
			useCluster(path, team, s.GetCluster())
			snap.Services = append(snap.Services, s)
			org.services = append(org.services, path)
		}
	}
	p := cfg.GetPlatform()
	snap.Products = sortedBy(p.GetProducts(), (*configv1.Product).GetName)
	snap.Plans = sortedBy(p.GetPlans(), (*configv1.Plan).GetName)
	snap.Scopes = sortedBy(p.GetScopes(), (*configv1.Scope).GetName)
	snap.Issuers = sortedBy(p.GetIssuers(), (*configv1.Issuer).GetName)
	snap.RateLimiting = p.GetRateLimiting()
	return snap, org
}

// checkOwned reports a route (hosts, path template) that lies outside
// team's space: every host (or the empty host, for a route on every host)
// needs an ownership whose prefix covers the literal start of the path.
func checkOwned(team *adminv1.Team, hosts []string, template, path, what string, errs *Error) {
	if team == nil {
		return
	}
	lit := literalPrefix(template)
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	for _, h := range hosts {
		ok := false
		for _, o := range team.GetOwns() {
			if strings.EqualFold(o.GetHost(), h) && covers(o.GetPathPrefix(), lit) {
				ok = true
				break
			}
		}
		if !ok {
			where := "host " + strconv.Quote(h)
			if h == "" {
				where = "every host"
			}
			errs.add(path, "%s on %s is outside team %q's hosts and path prefixes", what, where, team.GetName())
		}
	}
}

// literalPrefix is the part of a path template before its first variable,
// wildcard or verb: the part every path the route matches starts with.
func literalPrefix(template string) string {
	if i := strings.IndexAny(template, "{*:"); i >= 0 {
		return template[:i]
	}
	return template
}

// covers reports whether prefix owns path: path is prefix, or continues
// it after a "/".
func covers(prefix, path string) bool {
	if prefix == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// sortedBy returns a copy of list sorted by key, stable for equal keys.
func sortedBy[T any](list []T, key func(T) string) []T {
	out := slices.Clone(list)
	slices.SortStableFunc(out, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return out
}
