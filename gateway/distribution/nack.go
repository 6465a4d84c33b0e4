package distribution

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// Limits of what a node sends, within the stream's rules.
const (
	maxAckError     = 65536
	maxObjectError  = 4096
	maxObjects      = 1000
	defaultProbeFor = 3 * time.Second
	maxProbeFor     = 30 * time.Second
)

// applyError is a snapshot the node decoded and refused: the refusal and
// the config it was about, so that the NACK can name the objects.
type applyError struct {
	cfg *configv1.Snapshot
	err error
}

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }

// violationPath is the start of a snapshot field path: the list and the
// index of the object a problem is about.
var violationPath = regexp.MustCompile(`^([a-z_]+)\[(\d+)\]`)

// refusedObjects names the config objects a refusal is about, with their
// teams, so that the control plane can tell whose change a NACK is: a
// team's object, or the platform's. A refusal it cannot place (a snapshot
// that does not decode) is one object of kind "snapshot".
func refusedObjects(err error) []*distributionv1.RefusedObject {
	var ae *applyError
	if !errors.As(err, &ae) {
		return []*distributionv1.RefusedObject{{Kind: "snapshot", Error: truncate(err.Error(), maxObjectError)}}
	}
	cfg := ae.cfg
	var out []*distributionv1.RefusedObject
	seen := map[string]int{}
	add := func(o *distributionv1.RefusedObject, msg string) {
		key := o.GetKind() + "\x00" + o.GetName()
		if i, ok := seen[key]; ok {
			// One object, several problems: one entry, every message.
			if e := out[i].Error + "; " + msg; len(e) <= maxObjectError {
				out[i].Error = e
			}
			return
		}
		if len(out) == maxObjects {
			return
		}
		o.Error = truncate(msg, maxObjectError)
		seen[key] = len(out)
		out = append(out, o)
	}
	var serr *snapshot.Error
	var cerr *upstream.ClusterError
	switch {
	case errors.As(err, &serr):
		for _, v := range serr.Violations {
			add(objectAt(cfg, v.Path), v.String())
		}
	case errors.As(err, &cerr):
		o := &distributionv1.RefusedObject{Kind: "cluster", Name: cerr.Cluster}
		for _, c := range cfg.GetClusters() {
			if c.GetName() == cerr.Cluster {
				o.Team = c.GetTeam()
			}
		}
		add(o, cerr.Error())
	default:
		add(&distributionv1.RefusedObject{Kind: "snapshot"}, err.Error())
	}
	return out
}

// objectAt is the object a snapshot field path is in.
func objectAt(cfg *configv1.Snapshot, path string) *distributionv1.RefusedObject {
	m := violationPath.FindStringSubmatch(path)
	if m == nil {
		return &distributionv1.RefusedObject{Kind: "snapshot"}
	}
	i, _ := strconv.Atoi(m[2])
	at := func(n int) bool { return i < n }
	switch m[1] {
	case "routes":
		if at(len(cfg.GetRoutes())) {
			r := cfg.GetRoutes()[i]
			return &distributionv1.RefusedObject{Kind: "route", Team: r.GetTeam(), Name: r.GetId()}
		}
	case "clusters":
		if at(len(cfg.GetClusters())) {
			c := cfg.GetClusters()[i]
			return &distributionv1.RefusedObject{Kind: "cluster", Team: c.GetTeam(), Name: c.GetName()}
		}
	case "services":
		if at(len(cfg.GetServices())) {
			s := cfg.GetServices()[i]
			return &distributionv1.RefusedObject{Kind: "service", Team: s.GetTeam(), Name: s.GetId()}
		}
	case "issuers":
		if at(len(cfg.GetIssuers())) {
			return &distributionv1.RefusedObject{Kind: "issuer", Name: cfg.GetIssuers()[i].GetName()}
		}
	case "plans":
		if at(len(cfg.GetPlans())) {
			return &distributionv1.RefusedObject{Kind: "plan", Name: cfg.GetPlans()[i].GetName()}
		}
	case "products":
		if at(len(cfg.GetProducts())) {
			return &distributionv1.RefusedObject{Kind: "product", Name: cfg.GetProducts()[i].GetName()}
		}
	case "scopes":
		if at(len(cfg.GetScopes())) {
			return &distributionv1.RefusedObject{Kind: "scope", Name: cfg.GetScopes()[i].GetName()}
		}
	case "keys":
		if at(len(cfg.GetKeys())) {
			return &distributionv1.RefusedObject{Kind: "key", Name: cfg.GetKeys()[i].GetKeyId()}
		}
	}
	return &distributionv1.RefusedObject{Kind: "snapshot", Name: m[1]}
}

// probe runs a probe the control plane asked for and sends its result.
func (c *Client) probe(ctx context.Context, p *distributionv1.Probe, send func(*distributionv1.StreamRequest) error) {
	res := &distributionv1.ProbeResult{Id: p.GetId()}
	timeout := defaultProbeFor
	if d := p.GetTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = min(d.AsDuration(), maxProbeFor)
	}
	if c.opts.Node != nil {
		// Without a Node the answer says nothing of the clusters, so the
		// control plane does not wait for it.
		for _, r := range c.opts.Node.ProbeClusters(ctx, p.GetClusters(), timeout) {
			cp := &distributionv1.ClusterProbe{Name: r.Cluster}
			if r.Err != nil {
				cp.Error = truncate(r.Err.Error(), maxObjectError)
			}
			for _, e := range r.Endpoints {
				ep := &distributionv1.EndpointProbe{Address: e.Address, Healthy: e.Err == nil}
				if e.Err != nil {
					ep.Error = truncate(e.Err.Error(), maxObjectError)
				}
				cp.Endpoints = append(cp.Endpoints, ep)
			}
			res.Clusters = append(res.Clusters, cp)
		}
	}
	if err := send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_ProbeResult{ProbeResult: res}}); err != nil {
		c.log.Warn("sending a probe's result failed", "probe", p.GetId(), "err", err)
	}
}

// resourcesOf is the hello's account of the node's identities.
func resourcesOf(ids []upstream.IdentityInfo) *distributionv1.NodeResources {
	r := &distributionv1.NodeResources{}
	for _, id := range ids {
		info := &distributionv1.UpstreamIdentityInfo{Name: id.Name, Subject: truncate(id.Subject, 1024), Sha256: id.SHA256}
		if !id.NotAfter.IsZero() {
			info.NotAfter = timestamppb.New(id.NotAfter)
		}
		r.UpstreamIdentities = append(r.UpstreamIdentities, info)
	}
	return r
}

// maxListedEndpoints bounds the endpoints a hello or report lists over
// all clusters: the message must stay far below the control plane's read
// limit whatever one team's clusters hold.
const maxListedEndpoints = 1000

// healthOf is the node's account of its endpoints: per cluster, how many
// are healthy and how many not, and the ones that are not fully healthy,
// up to maxListedEndpoints in all.
func healthOf(clusters []upstream.ClusterStatus) []*distributionv1.ClusterHealth {
	out := make([]*distributionv1.ClusterHealth, 0, len(clusters))
	listed := 0
	for _, c := range clusters {
		h := &distributionv1.ClusterHealth{Name: c.Name}
		for _, e := range c.Endpoints {
			ejected := !e.EjectedUntil.IsZero()
			if e.Healthy && !ejected {
				h.Healthy++
			} else {
				h.Unhealthy++
			}
			if (!e.Healthy || ejected || e.RefusedDials > 0) && listed < maxListedEndpoints {
				listed++
				h.Endpoints = append(h.Endpoints, &distributionv1.EndpointHealth{
					Address: e.Address, Healthy: e.Healthy, Ejected: ejected, RefusedDials: e.RefusedDials,
				})
			}
		}
		out = append(out, h)
	}
	return out
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
