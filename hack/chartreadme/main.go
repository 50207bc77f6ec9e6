// Command chartreadme writes the values table of a Helm chart's README from
// the comments of its values.yaml, as helm-docs does (which cannot be had
// here): a value is documented by a comment starting with "# -- " right
// above it, continued by the comment lines that follow. A mapping without
// such a comment is a section: its keys are documented one by one. It fails
// on a value without a description, so that every value has one.
//
// Usage: go run ./hack/chartreadme [--verify] [charts/kruntimes]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

const (
	beginMarker = "<!-- values-table:begin (hack/chartreadme) -->"
	endMarker   = "<!-- values-table:end -->"
)

// row is one documented value.
type row struct {
	key, kind, defaultValue, description string
}

func main() {
	verify := flag.Bool("verify", false, "fail if the README's table is not what values.yaml gives, instead of writing it")
	flag.Parse()
	chart := "charts/kruntimes"
	if flag.NArg() > 0 {
		chart = flag.Arg(0)
	}
	if err := run(chart, *verify); err != nil {
		fmt.Fprintln(os.Stderr, "chartreadme:", err)
		os.Exit(1)
	}
}

func run(chart string, verify bool) error {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	rows, err := valueRows(values)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(chart, "values.yaml"), err)
	}
	readmePath := filepath.Join(chart, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	updated, err := replaceTable(readme, table(rows))
	if err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if bytes.Equal(updated, readme) {
		return nil
	}
	if verify {
		return fmt.Errorf("%s: the values table is out of date: run go run ./hack/chartreadme %s", readmePath, chart)
	}
	return os.WriteFile(readmePath, updated, 0o644)
}

// valueRows lists the documented values of a values.yaml, in file order.
func valueRows(values []byte) ([]row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a mapping of values")
	}
	var rows []row
	var undocumented []string
	var walk func(prefix string, m *yaml.Node) error
	walk = func(prefix string, m *yaml.Node) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			key, value := m.Content[i], m.Content[i+1]
			path := prefix + key.Value
			description, documented := descriptionOf(key.HeadComment)
			if !documented && value.Kind == yaml.MappingNode && len(value.Content) > 0 {
				if err := walk(path+".", value); err != nil {
					return err
				}
				continue
			}
			if !documented {
				undocumented = append(undocumented, path)
				continue
			}
			kind, defaultValue, err := render(value)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rows = append(rows, row{key: path, kind: kind, defaultValue: defaultValue, description: description})
		}
		return nil
	}
	if err := walk("", doc.Content[0]); err != nil {
		return nil, err
	}
	if len(undocumented) > 0 {
		return nil, fmt.Errorf("values without a \"# -- \" description: %s", strings.Join(undocumented, ", "))
	}
	return rows, nil
}

// descriptionOf returns the "# -- " comment of a key and the comment lines
// after it, joined into one line.
func descriptionOf(comment string) (string, bool) {
	var parts []string
	found := false
	for _, line := range strings.Split(comment, "\n") {
		line = strings.TrimSpace(line)
		if text, ok := strings.CutPrefix(line, "# -- "); ok {
			found, parts = true, []string{text}
			continue
		}
		if found {
			if text, ok := strings.CutPrefix(line, "#"); ok {
				parts = append(parts, strings.TrimSpace(text))
			}
		}
	}
	return strings.Join(parts, " "), found
}

// render gives a value's type and its default as compact JSON.
func render(value *yaml.Node) (string, string, error) {
	var v any
	if err := value.Decode(&v); err != nil {
		return "", "", err
	}
	kind := "string"
	switch v.(type) {
	case nil:
		kind = "null"
	case bool:
		kind = "bool"
	case int, int64, uint64:
		kind = "int"
	case float64:
		kind = "float"
	case []any:
		kind = "list"
	case map[string]any:
		kind = "object"
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "", "", err
	}
	return kind, string(out), nil
}

func table(rows []row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n")
	escape := strings.NewReplacer("|", `\|`, "\n", " ").Replace
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.key, r.kind, escape(r.defaultValue), escape(r.description))
	}
	return b.String()
}

// replaceTable puts table between the README's markers.
func replaceTable(readme []byte, table string) ([]byte, error) {
	text := string(readme)
	begin := strings.Index(text, beginMarker)
	end := strings.Index(text, endMarker)
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("no %q … %q markers to put the values table between", beginMarker, endMarker)
	}
	return []byte(text[:begin+len(beginMarker)] + "\n" + table + text[end:]), nil
}
