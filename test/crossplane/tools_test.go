package crossplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// repoRoot is the repository, seen from this package's directory (go test's working dir).
const repoRoot = "../.."

// cmdTimeout bounds every command a test runs; each takes well under a second or two.
const cmdTimeout = 2 * time.Minute

// cacheBin is where cluster/crossplane/build.sh puts the binaries by default.
func cacheBin() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "provider-kvm", "bin")
}

// tool returns the path of a binary built by `make tools`: $env, or else name in the cache
// directory. A missing binary skips the test loudly, or fails it under CI.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(cacheBin(), name)
	}
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return p
	}
	msg := fmt.Sprintf("%s not found at %s (set %s or run `make tools`, which builds it with cluster/crossplane/build.sh)", name, p, env)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
	return ""
}

func crossplaneCLI(t *testing.T) string { return tool(t, "CROSSPLANE_CLI", "crossplane") }

func autoReady(t *testing.T) string { return tool(t, "FUNCTION_AUTO_READY", "function-auto-ready") }

// result is what a command printed and how it ended.
type result struct {
	stdout, stderr string
	err            error // nil, or the exit error
	took           time.Duration
}

// run runs a command in dir with extra environment variables and returns its output. A
// command that cannot start at all, or that times out, fails the test.
func run(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	return runFor(t, cmdTimeout, dir, env, name, args...)
}

// runFor is run with its own bound instead of cmdTimeout.
func runFor(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	t0 := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String(), err: err, took: time.Since(t0)}
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || ctx.Err() != nil) {
		t.Fatalf("cannot run %s %s: %v\nstderr:\n%s", name, strings.Join(args, " "), err, r.stderr)
	}
	return r
}

// mustRun is run for a command that must succeed.
func mustRun(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	r := run(t, dir, env, name, args...)
	if r.err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r
}

// decodeAll decodes a YAML stream into objects, skipping empty documents. Numbers become
// int64 (or float64 with a fraction), as in objects read from the API server.
func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("cannot decode YAML: %v\n%s", err, data)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatalf("cannot decode object: %v\n%s", err, raw)
		}
		objs = append(objs, u)
	}
}

// readObjects decodes every object of a YAML file.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, b)
}
