// Command chart renders templates of a Helm chart with the chart's default values, as `helm
// template` would, for the test bed's node, which has no helm binary: crossplane.sh applies the
// RBAC of Crossplane's own chart (the chart in the crossplane module's cluster/charts/crossplane)
// instead of binding the core to cluster-admin.
//
//	chart -chart $GOMODCACHE/github.com/crossplane/crossplane/v2@v2.4.0/cluster/charts/crossplane \
//	  -namespace crossplane-system clusterrole.yaml clusterrolebinding.yaml ...
//
// It implements the part of Helm's template language those templates use: Go's text/template
// with the chart's named templates (templates/_*.tpl), .Values (values.yaml), .Chart (Name,
// Version, AppVersion of Chart.yaml), .Release (Name, Namespace, Service "Helm"), and the
// functions include, default, trunc, trimSuffix, replace, quote, indent, nindent and toYaml
// with Helm's (sprig's) meanings. A template that calls anything else fails to parse, loudly,
// rather than rendering something else. Output: each template's non-empty documents, after a
// "# Source: CHART/templates/FILE" comment, separated by "---", as helm template prints them.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	dir := fs.String("chart", "", "the chart's directory (Chart.yaml, values.yaml, templates/) (required)")
	ns := fs.String("namespace", "default", "the release's namespace")
	release := fs.String("release", "", "the release's name (default: the chart's name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() == 0 {
		return errors.New("want -chart DIR and at least one template file name")
	}
	c, err := Load(*dir)
	if err != nil {
		return err
	}
	if *release == "" {
		*release = c.Meta.Name
	}
	out, err := c.Render(Release{Name: *release, Namespace: *ns, Service: "Helm"}, fs.Args()...)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, out)
	return err
}

// Meta is what templates read of Chart.yaml as .Chart.
type Meta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

// Release is .Release.
type Release struct {
	Name, Namespace, Service string
}

// Chart is a chart read from its directory.
type Chart struct {
	Meta   Meta
	Values map[string]any
	dir    string
	// helpers are the named templates of templates/_*.tpl, by file name.
	helpers map[string]string
}

// Load reads the chart in dir.
func Load(dir string) (*Chart, error) {
	c := &Chart{dir: dir, helpers: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml")) //nolint:gosec // G304: the chart the caller names
	if err != nil {
		return nil, fmt.Errorf("cannot read the chart: %w", err)
	}
	if err := yaml.Unmarshal(b, &c.Meta); err != nil {
		return nil, fmt.Errorf("cannot parse Chart.yaml: %w", err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "values.yaml")); err != nil { //nolint:gosec // G304: as above
		return nil, fmt.Errorf("cannot read the chart's values: %w", err)
	}
	if err := yaml.Unmarshal(b, &c.Values); err != nil {
		return nil, fmt.Errorf("cannot parse values.yaml: %w", err)
	}
	if c.Values == nil {
		c.Values = map[string]any{}
	}
	tpls, err := filepath.Glob(filepath.Join(dir, "templates", "_*.tpl"))
	if err != nil {
		return nil, err
	}
	for _, f := range tpls {
		b, err := os.ReadFile(f) //nolint:gosec // G304: the chart's own files
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", f, err)
		}
		c.helpers[filepath.Base(f)] = string(b)
	}
	return c, nil
}

// separator splits a rendered template into documents, as Helm does.
var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Render renders the named files of templates/ for release and returns them as one YAML
// stream of their non-empty documents.
func (c *Chart) Render(r Release, files ...string) (string, error) {
	data := map[string]any{
		"Values":  c.Values,
		"Chart":   map[string]any{"Name": c.Meta.Name, "Version": c.Meta.Version, "AppVersion": c.Meta.AppVersion},
		"Release": map[string]any{"Name": r.Name, "Namespace": r.Namespace, "Service": r.Service},
	}
	var out strings.Builder
	for _, f := range files {
		if strings.ContainsAny(f, `/\`) {
			return "", fmt.Errorf("%q: name a file of templates/", f)
		}
		b, err := os.ReadFile(filepath.Join(c.dir, "templates", f)) //nolint:gosec // G304: a file of the chart's templates/
		if err != nil {
			return "", fmt.Errorf("cannot read template %s: %w", f, err)
		}
		t, err := c.template(f, string(b))
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, f, data); err != nil {
			return "", fmt.Errorf("cannot render %s: %w", f, err)
		}
		// Helm renders a missing value as empty, not as text/template's "<no value>".
		rendered := strings.ReplaceAll(buf.String(), "<no value>", "")
		for _, doc := range separator.Split(rendered, -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s/templates/%s\n%s\n", c.Meta.Name, f, strings.Trim(doc, "\n"))
		}
	}
	return out.String(), nil
}

// template parses the template file name with the chart's named templates.
func (c *Chart) template(name, text string) (*template.Template, error) {
	t := template.New(name).Option("missingkey=zero")
	t.Funcs(funcs(t))
	helpers := make([]string, 0, len(c.helpers))
	for h := range c.helpers {
		helpers = append(helpers, h)
	}
	sort.Strings(helpers)
	for _, h := range helpers {
		if _, err := t.New(h).Parse(c.helpers[h]); err != nil {
			return nil, fmt.Errorf("cannot parse %s: %w", h, err)
		}
	}
	if _, err := t.New(name).Parse(text); err != nil {
		return nil, fmt.Errorf("cannot parse %s: %w", name, err)
	}
	return t, nil
}

// funcs are the Helm and sprig functions the templates may call; include renders a named
// template of t.
func funcs(t *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var buf bytes.Buffer
			if err := t.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"default": func(d any, given ...any) any {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			if n < 0 && len(s) > -n {
				return s[len(s)+n:]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"quote": func(vs ...any) string {
			q := make([]string, 0, len(vs))
			for _, v := range vs {
				if v != nil {
					q = append(q, fmt.Sprintf("%q", fmt.Sprint(v)))
				}
			}
			return strings.Join(q, " ")
		},
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"toYaml": func(v any) string {
			b, err := yaml.Marshal(v)
			if err != nil {
				return "" // as Helm's toYaml
			}
			return strings.TrimSuffix(string(b), "\n")
		},
	}
}

// indent prefixes every line of s with n spaces.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// empty is sprig's notion of an empty value, which default replaces.
func empty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	default:
		return false
	}
}
