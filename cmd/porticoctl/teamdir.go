package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// loadTeamDir reads a team's directory into its TeamConfig: every .yaml,
// .yml and .json file is a TeamConfig document (team, routes, clusters,
// services), all naming the same team, merged in file name order. A
// service whose descriptors list .proto sources without content gets the
// content from the file of that name under the directory; a service with
// no descriptors at all gets DIR/<id>.binpb, a FileDescriptorSet (from
// `buf build -o`), if there is one.
func loadTeamDir(dir string) (*adminv1.TeamConfig, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", dir)
	}
	tc := &adminv1.TeamConfig{}
	for _, name := range names {
		path := filepath.Join(dir, name)
		var doc adminv1.TeamConfig
		if err := readConfigFile(path, &doc); err != nil {
			return nil, err
		}
		switch {
		case doc.GetTeam() == "":
			return nil, fmt.Errorf("%s: no team: every file says which team it is", path)
		case tc.GetTeam() != "" && doc.GetTeam() != tc.GetTeam():
			return nil, fmt.Errorf("%s: team %q, but the directory is team %q's", path, doc.GetTeam(), tc.GetTeam())
		}
		tc.Team = doc.GetTeam()
		tc.Routes = append(tc.Routes, doc.GetRoutes()...)
		tc.Clusters = append(tc.Clusters, doc.GetClusters()...)
		tc.Services = append(tc.Services, doc.GetServices()...)
	}
	for _, svc := range tc.GetServices() {
		if err := attachDescriptors(dir, svc); err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.GetId(), err)
		}
	}
	return tc, nil
}

// readConfigFile reads a YAML (or, by its .json name, JSON) file into m,
// with protojson's field names; unknown fields are errors.
func readConfigFile(path string, m proto.Message) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if filepath.Ext(path) != ".json" {
		if b, err = yaml.YAMLToJSONStrict(b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// attachDescriptors fills in a service's descriptor files from dir.
func attachDescriptors(dir string, svc *configv1.Service) error {
	if svc.GetDescriptors() == nil {
		b, err := os.ReadFile(filepath.Join(dir, svc.GetId()+".binpb"))
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no descriptors, and no " + svc.GetId() + ".binpb beside the config")
		}
		if err != nil {
			return err
		}
		svc.Descriptors = &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: b}}
		return nil
	}
	for _, f := range svc.GetDescriptors().GetSources().GetFiles() {
		if f.GetContent() != "" {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(f.GetName()))
		if rel, err := filepath.Rel(dir, path); err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("source %q is outside the directory", f.GetName())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("source %q: %w", f.GetName(), err)
		}
		f.Content = string(b)
	}
	return nil
}
