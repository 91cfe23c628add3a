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

// cloudConfig is the subset of cloud-init's #cloud-config that a proxy needs. It is encoded
// with a YAML encoder, never by pasting strings, so no user-given value can add YAML keys.
type cloudConfig struct {
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

// UserData renders the #cloud-config user-data of a proxy: the squid configuration as a
// file, the SSH keys, and commands that make squid listen on the proxy's port only and
// (re)start it now and at every boot. The image must ship squid (Debian's package).
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
		},
	}
	y, err := yaml.Marshal(cc)
	if err != nil {
		return "", errors.Wrap(err, "cannot encode cloud-config")
	}
	return "#cloud-config\n" + string(y), nil
}
