package function

import (
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"sigs.k8s.io/yaml"
)

// SquidConfPath is where the proxy's squid configuration goes. Debian's squid.conf includes
// /etc/squid/conf.d/*.conf before its own http_access rules, so an allow here takes effect.
const SquidConfPath = "/etc/squid/conf.d/proxy.conf"

// squidMainConf is Debian's main squid configuration. Its default "http_port 3128" is
// commented out so that squid listens on the proxy's port only (a second http_port on the
// same port would fail to bind).
const squidMainConf = "/etc/squid/squid.conf"

// GuestPackages are the Debian packages a proxy's guest needs: squid, and the guest agent that
// reports the guest's address on a bridge. An image without them gets them installed at first
// boot (PackagesConfig).
var GuestPackages = []string{"squid", "qemu-guest-agent"}

// PackagesConfig is the cloud-init configuration file that bootcmd writes when the image lacks
// some of GuestPackages: it lists them as cloud-init's `packages`, which its
// package-update-upgrade-install module (final stage) installs with apt. Each cloud-init stage
// reads /etc/cloud/cloud.cfg.d afresh, so the file written in the init stage counts in the
// final stage (shown in a real guest by test/stockimage, decision 82). When every package is there, no file is written and that module does nothing:
// no apt-get update, no network, no time.
const PackagesConfig = "/etc/cloud/cloud.cfg.d/90-provider-kvm-packages.cfg"

// The guest's apt configuration when the platform names apt sources (ProxyPolicy
// packages.aptSources) and a package is missing: AptSourcesConf points apt at AptSourcesList
// (the platform's lines) and the empty AptSourcesParts instead of the image's sources.list and
// sources.list.d, so apt-get update asks the platform's mirror alone (the image's would fail
// on a guest network with no way out). The image's own files stay as they were.
const (
	AptSourcesConf  = "/etc/apt/apt.conf.d/90provider-kvm-sources"
	AptSourcesList  = "/etc/apt/provider-kvm-sources.list"
	AptSourcesParts = "/etc/apt/provider-kvm-sources.list.d"
)

// packagesCheck is bootcmd's shell script: it lists the missing GuestPackages in
// PackagesConfig, or removes the file when none is missing (a later boot of an instance whose
// packages were installed). cloud-init passes the packages after "sh -c SCRIPT sh".
const packagesCheck = `missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing${missing:+, }$p"
done
if [ -n "$missing" ]; then
  printf '# provider-kvm: packages the image lacks, installed by cloud-init at first boot\npackages: [%s]\n' "$missing" >` + PackagesConfig + `
else
  rm -f ` + PackagesConfig + `
fi`

// aptSourcesScript is bootcmd's second script, there only when the platform names apt
// sources: after packagesCheck, when it listed packages to install, it writes the sources and
// points apt at them alone. cloud-init passes the sources after "sh -c SCRIPT sh". A Proxy
// without platform sources keeps the user-data it had before the setting existed (the same
// generation: no VM is replaced for it).
const aptSourcesScript = `[ -e ` + PackagesConfig + ` ] || exit 0
mkdir -p ` + AptSourcesParts + `
printf '%s\n' "$1" >` + AptSourcesList + `
printf '// provider-kvm: the platform'"'"'s apt sources (ProxyPolicy packages.aptSources)\nDir::Etc::SourceList "%s";\nDir::Etc::SourceParts "%s";\n' ` + AptSourcesList + ` ` + AptSourcesParts + ` >` + AptSourcesConf

// cloudConfig is the subset of cloud-init's #cloud-config that a proxy needs. It is encoded
// with a YAML encoder, never by pasting strings, so no user-given value can add YAML keys.
type cloudConfig struct {
	BootCmd           [][]string  `json:"bootcmd"`
	WriteFiles        []writeFile `json:"write_files"`
	SSHAuthorizedKeys []string    `json:"ssh_authorized_keys,omitempty"`
	RunCmd            [][]string  `json:"runcmd"`
}

type writeFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
}

// UserData renders the #cloud-config user-data of a proxy: a check of the image's packages
// (bootcmd: squid and the guest agent are installed through cloud-init's packages module when
// missing, nothing happens when present), the squid configuration as a file, the SSH keys, and
// commands that make squid listen on the proxy's port only and (re)start it now and at every
// boot. The image must be Debian's (apt, dpkg) with cloud-init; a stock genericcloud image
// needs a reachable Debian mirror at first boot (its own sources', or p.AptSources), an image
// with both packages nothing.
func UserData(p Proxy, hostname string) (string, error) {
	files := []writeFile{{
		Path:        SquidConfPath,
		Owner:       "root:root",
		Permissions: "0644",
		Content:     SquidConf(p, hostname),
	}}
	for _, pg := range SquidErrorPages(p) {
		files = append(files, writeFile{Path: SquidErrorPagesDir + "/" + pg.Name, Owner: "root:root", Permissions: "0644", Content: pg.Content})
	}
	cc := cloudConfig{
		BootCmd:           [][]string{append([]string{"sh", "-c", packagesCheck, "sh"}, GuestPackages...)},
		WriteFiles:        files,
		SSHAuthorizedKeys: p.SSHAuthorizedKeys,
		RunCmd: [][]string{
			{"sed", "-i", "-e", `s/^http_port[[:space:]]/# provider-kvm: see conf.d\/proxy.conf: &/`, squidMainConf},
			// restart, not start: on an image whose squid is enabled it started with the
			// default configuration before runcmd. Restart first, enable after: enabling is
			// for the next boots, and it costs seconds under emulation (the SysV script sync),
			// so the proxy answers before it. No daemon reload is needed for that.
			{"systemctl", "restart", "squid"},
			{"systemctl", "enable", "--no-reload", "squid"},
			// A guest agent installed at this boot: its unit starts with its virtio port's
			// device, which appeared before the package; start it now. Already running: a
			// no-op, and --no-block waits for nothing.
			{"systemctl", "start", "--no-block", "qemu-guest-agent"},
		},
	}
	if p.AptSources != "" {
		cc.BootCmd = append(cc.BootCmd, []string{"sh", "-c", aptSourcesScript, "sh", p.AptSources})
	}
	y, err := yaml.Marshal(cc)
	if err != nil {
		return "", errors.Wrap(err, "cannot encode cloud-config")
	}
	return "#cloud-config\n" + string(y), nil
}
