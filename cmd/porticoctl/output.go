package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// format is how porticoctl prints answers, the value of -o/--output.
type format string

const (
	formatText format = "text" // for people: sentences and tables
	formatJSON format = "json" // the answer's proto as protojson
)

// formats are the values of --output, as completion offers them.
var formats = []string{string(formatText), string(formatJSON)}

func (f *format) String() string { return string(*f) }

func (f *format) Set(v string) error {
	if !slices.Contains(formats, v) {
		return fmt.Errorf("want %s", orList(formats))
	}
	*f = format(v)
	return nil
}

// Type is the value's name in the help: -o, --output text|json.
func (f *format) Type() string { return strings.Join(formats, "|") }

// structured reports whether answers are printed as their protos (-o
// json) rather than as text.
func (c *cli) structured() bool { return c.output != formatText }

// printMessage prints m as JSON (with -o json, and for platform get,
// whose text is its JSON).
func (c *cli) printMessage(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return &failure{err: err}
	}
	if _, err := fmt.Fprintln(c.stdout, string(b)); err != nil {
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
