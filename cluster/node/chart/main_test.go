package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunRendersLikeHelmTemplate(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-chart", "testdata/demo", "-namespace", "team-a", "sa.yaml"}, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	// What `helm template demo testdata/demo -n team-a -s templates/sa.yaml` prints, but for
	// its trailing spaces after "labels:" (the include's leading newline, indented).
	want := `---
# Source: demo/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: demo
  namespace: team-a
  labels:    
    helm.sh/chart: demo-1.2.3_build
    app.kubernetes.io/instance: demo
    app.kubernetes.io/version: "4.5.6"
  annotations: 
    team: a
`
	if d := cmp.Diff(want, out.String()); d != "" {
		t.Errorf("rendered (-want +got):\n%s", d)
	}
}

func TestRunRefuses(t *testing.T) {
	for name, args := range map[string][]string{
		"no chart":         {"sa.yaml"},
		"no template":      {"-chart", "testdata/demo"},
		"missing chart":    {"-chart", "testdata/nope", "sa.yaml"},
		"missing template": {"-chart", "testdata/demo", "nope.yaml"},
		"path not a file":  {"-chart", "testdata/demo", "../Chart.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(args, &strings.Builder{}); err == nil {
				t.Errorf("run(%q) succeeded, want an error", args)
			}
		})
	}
}

func TestFuncs(t *testing.T) {
	cases := map[string]struct {
		text string
		want string
	}{
		"default empty string":  {`{{ default "d" "" }}`, "d"},
		"default given":         {`{{ default "d" "x" }}`, "x"},
		"default missing value": {`{{ default "d" .Missing }}`, "d"},
		"trunc":                 {`{{ "abcdef" | trunc 3 }}`, "abc"},
		"trimSuffix":            {`{{ "name-" | trimSuffix "-" }}`, "name"},
		"quote":                 {`{{ "a\"b" | quote }}`, `"a\"b"`},
		"indent":                {`{{ "a\nb" | indent 2 }}`, "  a\n  b"},
		"nindent":               {`{{ "a" | nindent 2 }}`, "\n  a"},
		"toYaml":                {`{{ toYaml .Map }}`, "k: v"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &Chart{helpers: map[string]string{}}
			tpl, err := c.template("t", tc.text)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := tpl.ExecuteTemplate(&b, "t", map[string]any{"Map": map[string]any{"k": "v"}}); err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(b.String(), "<no value>", ""); got != tc.want {
				t.Errorf("%s = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}
