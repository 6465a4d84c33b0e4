package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"buf.build/go/protoyaml"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// format is how porticoctl prints answers, the value of -o/--output.
type format string

const (
	formatText format = "text" // for people: sentences and tables
	formatJSON format = "json" // the answer's proto as protojson
	formatYAML format = "yaml" // the same as YAML, which -f files take too
)

// formats are the values of --output, as completion offers them.
var formats = []string{string(formatText), string(formatJSON), string(formatYAML)}

func (f *format) String() string { return string(*f) }

func (f *format) Set(v string) error {
	if !slices.Contains(formats, v) {
		return fmt.Errorf("want %s", orList(formats))
	}
	*f = format(v)
	return nil
}

// Type is the value's name in the help: -o, --output text|json|yaml.
func (f *format) Type() string { return strings.Join(formats, "|") }

// structured reports whether answers are printed as their protos (-o
// json, -o yaml) rather than as text.
func (c *cli) structured() bool { return c.output != formatText }

// printMessage prints m as YAML with -o yaml, else as JSON (with -o
// json, and for platform get, whose text is its JSON). Both spell fields
// as protojson does, as the files of apply and platform put do.
func (c *cli) printMessage(m proto.Message) error {
	var b []byte
	var err error
	if c.output == formatYAML {
		b, err = protoyaml.MarshalOptions{Indent: 2}.Marshal(m)
	} else {
		b, err = protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
		b = append(b, '\n')
	}
	if err != nil {
		return &failure{err: err}
	}
	if _, err := c.stdout.Write(b); err != nil {
		return &failure{err: err}
	}
	return nil
}

// table is a text table: a header row in capitals, then a row a thing,
// its columns aligned when it is flushed (kubectl's layout).
type table struct{ tw *tabwriter.Writer }

// newTable starts a table on w with the given column headers.
func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(headers...)
	return t
}

// row adds a row; an empty cell is printed as "-".
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = dash(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// flush prints the table.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return &failure{err: err}
	}
	return nil
}

// dash stands in for an empty table cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
