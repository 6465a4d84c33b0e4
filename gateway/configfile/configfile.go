// Package configfile reads snapshot config files: YAML or JSON mapped onto
// configv1.Snapshot with protojson, so a file uses exactly the field names of
// the protos (snake_case or lowerCamelCase) and an unknown field is an error,
// not a silently ignored typo.
package configfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

var jsonPosition = regexp.MustCompile(`\(line \d+:\d+\): `)

// Format of a config file.
type Format int

const (
	// Auto picks JSON for a document starting with '{', YAML otherwise.
	Auto Format = iota
	JSON
	YAML
)

// FormatOf guesses the format from a file name's extension.
func FormatOf(name string) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return JSON
	case ".yaml", ".yml":
		return YAML
	}
	return Auto
}

// Parse decodes data as a snapshot. It checks syntax and field names only;
// snapshot.Compile validates the content.
func Parse(data []byte, format Format) (*configv1.Snapshot, error) {
	if format == Auto {
		format = YAML
		if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
			format = JSON
		}
	}
	js := data
	if format == YAML {
		var err error
		// The strict conversion refuses duplicate keys; field names and
		// types are protojson's to check.
		js, err = yaml.YAMLToJSONStrict(data)
		if err != nil {
			return nil, fmt.Errorf("yaml: %w", err)
		}
	}
	cfg := &configv1.Snapshot{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, cfg); err != nil {
		if format == YAML {
			// protojson's positions are in the JSON converted from the
			// YAML, which would only mislead; its message quotes the value.
			return nil, fmt.Errorf("config: %s", jsonPosition.ReplaceAllString(err.Error(), ""))
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// Load reads and parses the file at path. The snapshot's version, when the
// file does not set one, is "file:" plus the file's base name.
func Load(path string) (*configv1.Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseFile(path, data)
}

func parseFile(path string, data []byte) (*configv1.Snapshot, error) {
	cfg, err := Parse(data, FormatOf(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.GetVersion() == "" {
		cfg.Version = "file:" + filepath.Base(path)
	}
	return cfg, nil
}
