//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The README's quickstart (section quickstartHeading of README.md), run by make e2e as a
// person runs it (docs/e2e.md, "The README's quickstart"): its shell blocks are read from the
// README as they are, cut into its numbered steps ("# 1. ..."), and each step runs in one bash
// session with kubectl and the crossplane CLI on PATH, with only the substitutions of
// quickstartSubsts put in. Each of those must still occur in its step, so a README that changed
// under the test fails it instead of being silently not run.
const quickstartHeading = "## Quickstart on your own cluster"

// qsStep is one numbered step of the quickstart: its number, its title (the rest of its
// "# N. " line) and its shell text, that line included.
type qsStep struct {
	N      int
	Title  string
	Script string
}

var stepLine = regexp.MustCompile(`^# ([0-9]+)\. (.*)$`)

// quickstartSteps reads the quickstart's steps from the README's text: every ```sh block of
// its section, in order, cut at each "# N. " line. The steps must be numbered 1, 2, ... and
// nothing but comments and blank lines may come before the first.
func quickstartSteps(readme string) ([]qsStep, error) {
	var (
		in, inBlock, found bool
		steps              []qsStep
	)
	sc := bufio.NewScanner(strings.NewReader(readme))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in:
			in = strings.TrimSpace(line) == quickstartHeading
			found = found || in
			continue
		case !inBlock && strings.HasPrefix(line, "## "):
			in = false
			continue
		case !inBlock && strings.TrimSpace(line) == "```sh":
			inBlock = true
			continue
		case inBlock && strings.TrimSpace(line) == "```":
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if m := stepLine.FindStringSubmatch(line); m != nil {
			num, _ := strconv.Atoi(m[1])
			if num != len(steps)+1 {
				return nil, fmt.Errorf("README.md:%d: quickstart step %d follows step %d", n, num, len(steps))
			}
			steps = append(steps, qsStep{N: num, Title: m[2]})
		}
		if len(steps) == 0 {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				return nil, fmt.Errorf("README.md:%d: a command before the quickstart's step 1: %q", n, t)
			}
			continue
		}
		steps[len(steps)-1].Script += line + "\n"
	}
	switch {
	case !found:
		return nil, fmt.Errorf("README.md has no section %q", quickstartHeading)
	case inBlock:
		return nil, errors.New("README.md: the quickstart's last sh block is not closed")
	case len(steps) == 0:
		return nil, errors.New("README.md: the quickstart has no numbered steps (\"# 1. ...\") in a sh block")
	}
	return steps, nil
}

// A qsSubst is one substitution in the quickstart: in step Step (0: in the file File of the
// test bed's copy of examples/), From becomes the value of To, a key of qsValues. Why says
// what the README's text stands for.
type qsSubst struct {
	Step     int
	File     string
	From, To string
	Why      string
}

// quickstartSubsts are the substitutions docs/e2e.md lists ("The README's quickstart"): the
// addresses of this test bed in place of the README's and its examples', where the run's
// cache put the CLI, and the test bed's two facts a person edits in the host's config for
// their host (its pool's name; qemu, as the test bed has no KVM). The Proxy's image (team-a's shared-image.yaml) takes the
// substitutions make e2e gives that example anyway (proxyExamples), and the application Pod
// (examples/app/proxy-client.yaml) the node's httpget image and its URLs (appPod), as the
// test bed reaches no public registry.
var quickstartSubsts = []qsSubst{
	{Step: 1, From: "XP=~/.cache/provider-kvm/bin/crossplane", To: "XP", Why: "where make tools built the CLI: the run's cache (CACHE_DIR, ~/.cache/provider-kvm unless set)"},
	{Step: 1, From: "REG=registry.example.org/provider-kvm", To: "REG", Why: "your registry: the node's, as pods reach it"},
	{Step: 3, From: "$HOME/.ssh/id_ed25519", To: "SSH_KEY", Why: "your SSH key: the test bed's client key"},
	{Step: 3, From: "ssh-keyscan kvm-host-1.example.org", To: "KEYSCAN", Why: "your host: host A's LAN address"},
	{File: exCPCFile, From: "host: kvm-host-1.example.org", To: "HOST_LINE", Why: "your host: host A's LAN address"},
	{File: exCPCFile, From: "pool: default", To: "POOL_LINE", Why: "your host's pool: host A's"},
	{File: exCPCFile, From: "bridgeCIDRs: [192.168.50.0/24]", To: "BRIDGE_CIDRS_LINE", Why: "your bridge's network: the LAN"},
	{File: exCPCFile, From: "- cidr: 10.20.30.40/32", To: "MIRROR_LINE", Why: "your image mirror: the test bed's image servers"},
	{File: exCPCFile, From: "ports: [8080]", To: "MIRROR_PORTS_LINE", Why: "your image mirror's port: the image servers' (http, https)"},
	{File: exCPCFile, From: "domainType: kvm", To: "DOMAIN_TYPE_LINE", Why: "the test bed has no KVM: TCG"},
}

// exCPCFile is the host config the quickstart applies.
const exCPCFile = "examples/provider/clusterproviderconfig.yaml"

// substituteStep puts the values into step s's text (those of quickstartSubsts for s.N); each
// From must occur in it.
func substituteStep(s qsStep, vals map[string]string) (string, error) {
	text := s.Script
	for _, q := range quickstartSubsts {
		if q.Step != s.N {
			continue
		}
		to, ok := vals[q.To]
		if !ok {
			return "", fmt.Errorf("quickstart step %d: no value for %s", s.N, q.To)
		}
		if !strings.Contains(text, q.From) {
			return "", fmt.Errorf("README.md's quickstart step %d no longer contains %q (%s): update test/e2e/quickstart.go's substitutions with the README", s.N, q.From, q.Why)
		}
		text = strings.ReplaceAll(text, q.From, to)
	}
	return text, nil
}

// ------------------------------------------------------------------ running it

// qsMarker is what the session prints after each step it ran.
const qsMarker = "@@quickstart-step-done"

// qsDriver is the bash session the steps run in: it reads "DIR<TAB>FILE" lines from fd 3 and
// sources FILE (a step) in DIR, so that a step's variables (XP, REG) reach the next; set -e
// ends the session at the first command that fails.
const qsDriver = `set -euo pipefail
while IFS=$'\t' read -r dir file <&3; do
	cd "$dir"
	. "$file"
	echo ` + qsMarker + `
done
`

// qsSession is one bash session that runs the quickstart's steps in order, one at a time.
type qsSession struct {
	steps []qsStep
	vals  map[string]string
	dir   string // the session's work directory, with the test bed's copy of examples/
	cmd   *exec.Cmd
	ctl   *os.File    // the write end of fd 3
	marks chan string // a line for each step run; closed when the session's output ends
	exit  chan error  // the session's exit
	log   *os.File
}

// run runs step n in directory dir and waits until it ended, at most timeout.
func (q *qsSession) run(ctx context.Context, n int, dir string, timeout time.Duration) error {
	if n < 1 || n > len(q.steps) {
		return fmt.Errorf("the README's quickstart has %d steps, not %d", len(q.steps), n)
	}
	s := q.steps[n-1]
	text, err := substituteStep(s, q.vals)
	if err != nil {
		return err
	}
	file := filepath.Join(q.dir, fmt.Sprintf("step-%d.sh", n))
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return err
	}
	logf("  README quickstart step %d (%s), in %s:\n%s", n, s.Title, dir, indent(strings.TrimRight(text, "\n"), "    $ "))
	fmt.Fprintf(q.log, "===== step %d in %s\n%s", n, dir, text)
	t0 := time.Now()
	if _, err := fmt.Fprintf(q.ctl, "%s\t%s\n", dir, file); err != nil {
		return fmt.Errorf("quickstart step %d: the session ended: %w", n, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case _, ok := <-q.marks:
		if !ok {
			err := <-q.exit
			q.exit <- err
			return fmt.Errorf("README quickstart step %d (%s) failed after %ss (%v); its output is above and in %s", n, s.Title, secs(time.Since(t0)), err, q.log.Name())
		}
	case <-ctx.Done():
		q.kill()
		return fmt.Errorf("README quickstart step %d (%s) did not end within %s; its output is above and in %s", n, s.Title, timeout, q.log.Name())
	}
	logf("  README quickstart step %d done in %ss", n, secs(time.Since(t0)))
	return nil
}

// close ends the session: no more steps; it is killed when it does not end within 10 s.
func (q *qsSession) close() {
	if q == nil || q.cmd == nil {
		return
	}
	_ = q.ctl.Close()
	go func() {
		for range q.marks {
			// drained: the reader must not block on a step's mark
		}
	}()
	select {
	case <-q.exit:
	case <-time.After(10 * time.Second):
		q.kill()
		<-q.exit
	}
	_ = q.log.Close()
	q.cmd = nil
}

// kill kills the session's process group.
func (q *qsSession) kill() {
	if q.cmd != nil && q.cmd.Process != nil {
		_ = syscall.Kill(-q.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// quickstartValues are the values of quickstartSubsts on this test bed.
func (e *env) quickstartValues() map[string]string {
	h := hostConfig{SSHHost: "kvm-host-1.example.org", SSHPort: 22, Pool: "default"}
	if len(e.cfg.Hosts) > 0 {
		h = e.cfg.Hosts[0]
	}
	keyscan := "ssh-keyscan " + h.SSHHost
	if h.SSHPort != 22 {
		keyscan = fmt.Sprintf("ssh-keyscan -p %d %s", h.SSHPort, h.SSHHost)
	}
	return map[string]string{
		"XP":                "XP=" + filepath.Join(e.cfg.Bin, "crossplane"),
		"REG":               "REG=" + e.cfg.quickstartRegistry(),
		"SSH_KEY":           e.cfg.SSHKey,
		"KEYSCAN":           keyscan,
		"HOST_LINE":         "host: " + h.SSHHost,
		"POOL_LINE":         "pool: " + h.Pool,
		"BRIDGE_CIDRS_LINE": "bridgeCIDRs: [" + e.guestCIDR + "]",
		"MIRROR_LINE":       "- cidr: " + e.cfg.ImageHost + "/32",
		"MIRROR_PORTS_LINE": fmt.Sprintf("ports: [%d, %d, %d]", e.cfg.ImagePort, e.cfg.ImageTLSPort, e.cfg.ImageUntrustedPort),
		"DOMAIN_TYPE_LINE":  "domainType: qemu",
	}
}

// quickstartRegistry is the quickstart's $REG on the test bed: a repository of the node's
// registry, under the address pods pull from.
func (c config) quickstartRegistry() string { return c.NodeRegistry + "/provider-kvm" }
