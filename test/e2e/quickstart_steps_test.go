//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	pkgv1 "github.com/crossplane/crossplane/apis/v2/pkg/v1"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// fileExample is the substitutions of quickstartSubsts for file, as an example.
func fileExample(file string) example {
	ex := example{File: file}
	for _, q := range quickstartSubsts {
		if q.File == file {
			ex.Subst = append(ex.Subst, [2]string{q.From, q.To})
		}
	}
	return ex
}

// startQuickstart reads the quickstart's steps from README.md, writes the test bed's copies of
// the example files it applies into $WORK/quickstart/examples and starts the session: bash
// with kubectl (cluster/node/kubectl.sh, the node's) and the crossplane CLI on PATH and
// KUBECONFIG set, its output in logs/quickstart.log and in the test's.
func (e *env) startQuickstart() (*qsSession, error) {
	b, err := os.ReadFile(filepath.Join(e.cfg.Repo, "README.md"))
	if err != nil {
		return nil, err
	}
	steps, err := quickstartSteps(string(b))
	if err != nil {
		return nil, err
	}
	q := &qsSession{steps: steps, vals: e.quickstartValues(), dir: filepath.Join(e.cfg.Work, "quickstart")}
	if err := e.writeQuickstartExamples(q.dir, q.vals); err != nil {
		return nil, err
	}
	bin := filepath.Join(q.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	kubectl := filepath.Join(bin, "kubectl")
	_ = os.Remove(kubectl)
	if err := os.Symlink(filepath.Join(e.cfg.Repo, "cluster", "node", "kubectl.sh"), kubectl); err != nil {
		return nil, err
	}
	if q.log, err = os.Create(filepath.Join(e.cfg.Logs, "quickstart.log")); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	q.ctl = w
	q.cmd = exec.Command("bash", "-c", qsDriver)
	q.cmd.Dir = e.cfg.Repo
	q.cmd.ExtraFiles = []*os.File{r} // fd 3
	q.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	q.cmd.Env = append(os.Environ(),
		"PATH="+bin+":"+e.cfg.Bin+":/usr/local/go/bin:"+os.Getenv("PATH"),
		"KUBECONFIG="+e.cfg.Kubeconfig,
		// Inside netns node there is no Internet: make xpkg builds from the module cache.
		"GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := q.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	q.cmd.Stderr = q.cmd.Stdout
	if err := q.cmd.Start(); err != nil {
		return nil, err
	}
	_ = r.Close()
	q.marks, q.exit = make(chan string), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line, mark := strings.CutSuffix(sc.Text(), qsMarker) // after output without a newline too
			if line != "" || !mark {
				fmt.Fprintln(q.log, line)
				fmt.Printf("    quickstart| %s\n", line)
			}
			if mark {
				q.marks <- qsMarker
			}
		}
		close(q.marks)
		q.exit <- q.cmd.Wait()
	}()
	return q, nil
}

// quickstartPod is the application Pod of the quickstart's step 4 (examples/app/proxy-client.yaml
// with the node's httpget image asking for the origin and a private address through egress-a).
func quickstartPod(origin string) appPod {
	return appPod{NS: "team-a", Name: "proxy-client", Proxy: "egress-a", Gets: []appGet{
		{URL: origin, Code: 204},
		{URL: deniedPrivate, Code: 403, Page: "ERR_PROXY_DST_PRIVATE"},
	}}
}

// writeQuickstartExamples writes the test bed's copies of the example files the quickstart
// applies under dir/examples: the host config with quickstartSubsts, team-a's shared image and
// Proxies as make e2e applies that example (proxyExamples), the application Pod as appPod
// makes it.
func (e *env) writeQuickstartExamples(dir string, qsVals map[string]string) error {
	vals := e.values()
	maps.Copy(vals, qsVals)
	texts := map[string]string{}
	read := func(ex example) error {
		b, err := os.ReadFile(filepath.Join(e.cfg.Repo, ex.File))
		if err != nil {
			return err
		}
		texts[ex.File], err = ex.substitute(string(b), vals)
		return err
	}
	if err := read(fileExample(exCPCFile)); err != nil {
		return err
	}
	if h := e.cfg.Hosts; len(h) > 0 && !strings.Contains(texts[exCPCFile], "bridge: "+h[0].Bridge+" ") {
		return fmt.Errorf("%s no longer attaches guests to bridge %s, the test bed's: update test/e2e/quickstart.go with it", exCPCFile, h[0].Bridge)
	}
	for _, ex := range proxyExamples("") {
		if ex.File == "examples/proxy/shared-image.yaml" {
			if err := read(ex); err != nil {
				return err
			}
		}
	}
	pod, err := quickstartPod(e.probeURL).manifest(e.cfg.Repo, e.cfg.ClientImage, vals)
	if err != nil {
		return err
	}
	texts[exAppFile] = pod
	for f, text := range texts {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// providerManifest is the platform's Provider: installed before the quickstart's step 2 for
// its DeploymentRuntimeConfig (cluster/node/packages.sh made it: the provider's flags and the
// test bed's CA), as docs/platform-teams.md says; the Configuration's dependency on the
// provider is then satisfied by it.
const providerManifest = "provider.yaml"

// ensurePackages installs the packages the way the README's quickstart does when no
// Configuration is installed yet (make e2e: cluster/node/packages.sh put only the platform's
// part in place): its step 1 (make xpkg, the pushes to the node's registry), the platform's
// Provider, its step 2 (the ImageConfig, the Configuration); then it checks what Crossplane
// resolved. It runs the steps in e.qs, or in a session of its own.
func (e *env) ensurePackages(ctx context.Context) error {
	l := &pkgv1.ConfigurationList{}
	if err := e.c.List(ctx, l); err != nil {
		return err
	}
	if len(l.Items) > 0 {
		return nil
	}
	q := e.qs
	if q == nil {
		var err error
		if q, err = e.startQuickstart(); err != nil {
			return err
		}
		defer q.close()
	}
	t0 := time.Now()
	logf("installing the packages as the README's quickstart does (steps 1 and 2, %s)", filepath.Join(e.cfg.Logs, "quickstart.log"))
	if err := q.run(ctx, 1, e.cfg.Repo, 20*time.Minute); err != nil {
		return err
	}
	e.tl.add("quickstart step 1", "make xpkg, the packages pushed to the registry", secs(time.Since(t0)))
	if err := e.apply(ctx, providerManifest, e.values()); err != nil {
		return err
	}
	if err := waitFor(ctx, "the platform's Provider provider-kvm Healthy", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
		p := &pkgv1.Provider{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "provider-kvm"}, p); err != nil {
			return err
		}
		return conditionTrue("Provider", p.Name, p.GetCondition(pkgv1.TypeHealthy))
	}); err != nil {
		return err
	}
	t2 := time.Now()
	if err := q.run(ctx, 2, e.cfg.Repo, 15*time.Minute); err != nil {
		return err
	}
	e.tl.add("quickstart step 2", "ImageConfig, Configuration installed and Healthy", secs(time.Since(t2)))
	return e.checkResolution(ctx)
}

// checkResolution checks what the quickstart's step 2 made Crossplane do: the Configuration
// was pulled through the README's ImageConfig from $REG; its dependencies were resolved, the
// provider by the platform's Provider (no second one), the two Functions installed by
// Crossplane under the names the Compositions use, from the node's registry.
func (e *env) checkResolution(ctx context.Context) error {
	reg := e.cfg.quickstartRegistry()
	cfgName := "provider-kvm-configuration-kvm-proxy" // the CLI's name for the package
	c := &pkgv1.Configuration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: cfgName}, c); err != nil {
		return fmt.Errorf("Configuration %s (the quickstart's crossplane xpkg install): %w", cfgName, err)
	}
	if want := reg + "/configuration-kvm-proxy:v0.1.0"; c.Status.ResolvedPackage != want {
		return fmt.Errorf("Configuration %s was pulled as %q, want %q (the README's ImageConfig)", cfgName, c.Status.ResolvedPackage, want)
	}
	if !slices.Contains(c.Status.AppliedImageConfigRefs, pkgv1.ImageConfigRef{Name: "provider-kvm", Reason: pkgv1.ImageConfigReasonRewrite}) {
		return fmt.Errorf("Configuration %s: the README's ImageConfig provider-kvm did not rewrite its package (applied: %+v)", cfgName, c.Status.AppliedImageConfigRefs)
	}
	ps := &pkgv1.ProviderList{}
	if err := e.c.List(ctx, ps); err != nil {
		return err
	}
	if len(ps.Items) != 1 || ps.Items[0].Name != "provider-kvm" {
		names := []string{}
		for i := range ps.Items {
			names = append(names, ps.Items[i].Name)
		}
		return fmt.Errorf("Providers %v, want provider-kvm alone: the platform's satisfies the Configuration's dependency", names)
	}
	for _, f := range []struct{ name, pkg, pulled string }{
		{fnProxy, "xpkg.crossplane.io/provider-kvm/function-kvm-proxy:v0.1.0", reg + "/function-kvm-proxy:v0.1.0"},
		{fnAutoReady, "xpkg.crossplane.io/crossplane-contrib/function-auto-ready:v0.7.0", e.cfg.NodeRegistry + "/crossplane-contrib/function-auto-ready:v0.7.0"},
	} {
		if err := waitFor(ctx, "Function "+f.name+", installed by dependency resolution", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
			fn := &pkgv1.Function{}
			if err := e.c.Get(ctx, client.ObjectKey{Name: f.name}, fn); err != nil {
				return err
			}
			if fn.Spec.Package != f.pkg || fn.Status.ResolvedPackage != f.pulled {
				return fmt.Errorf("package %q pulled as %q, want %q pulled as %q", fn.Spec.Package, fn.Status.ResolvedPackage, f.pkg, f.pulled)
			}
			return conditionTrue("Function", f.name, fn.GetCondition(pkgv1.TypeHealthy))
		}); err != nil {
			return err
		}
	}
	logf("  Configuration %s pulled as %s through the README's ImageConfig; Functions %s and %s installed by dependency resolution; the platform's Provider provider-kvm satisfied the provider dependency", cfgName, c.Status.ResolvedPackage, fnProxy, fnAutoReady)
	return nil
}

// quickstartHost is install's installHost: while the quickstart runs (e.qs), host A's config
// is its step 3's (quickstartHostStep); the others' come from the manifest.
func (e *env) quickstartHost(ctx context.Context, h hostConfig) (bool, error) {
	if e.qs == nil || len(e.cfg.Hosts) == 0 || h.Name != e.cfg.Hosts[0].Name {
		return false, nil
	}
	return true, e.quickstartHostStep(ctx, h)
}

// quickstartHostStep runs the quickstart's step 3 for host h (its Secret and the host config of
// examples/provider, as the test bed's copy has it) and checks what the README says of it:
// Ready, with the host's CPUs and memory.
func (e *env) quickstartHostStep(ctx context.Context, h hostConfig) error {
	if err := e.qs.run(ctx, 3, e.qs.dir, 10*time.Minute); err != nil {
		return err
	}
	pc := &v1alpha1.ClusterProviderConfig{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: h.Name}, pc); err != nil {
		return fmt.Errorf("the quickstart's ClusterProviderConfig: %w", err)
	}
	if err := conditionTrue("ClusterProviderConfig", h.Name, pc.GetCondition(xpv2.TypeReady)); err != nil {
		return err
	}
	st := pc.Status.Host
	if st == nil || st.CPUs == 0 || st.MemoryTotal == nil || st.MemoryFree == nil {
		return fmt.Errorf("ClusterProviderConfig %s is Ready but does not report the host's CPUs and memory: %+v", h.Name, st)
	}
	if pc.Spec.Host != h.SSHHost {
		return fmt.Errorf("ClusterProviderConfig %s names host %s, want %s", h.Name, pc.Spec.Host, h.SSHHost)
	}
	logf("  ClusterProviderConfig %s from %s: Ready, host %s with %d CPUs, %s memory (%s free)", h.Name, exCPCFile, h.SSHHost, st.CPUs, st.MemoryTotal, st.MemoryFree)
	return nil
}
