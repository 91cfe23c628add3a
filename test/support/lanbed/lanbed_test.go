package lanbed

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromEnv(t *testing.T) {
	full := map[string]string{
		"LAN_DIR": "/var/lib/provider-kvm-lan", "LAN_HOSTS": "host-a host-b", "LAN_SSH_KEY": "/k", "LAN_SSH_KNOWN_HOSTS": "/kh",
		"LAN_HOST_A_IP": "10.77.0.11", "LAN_HOST_A_POOL": "pool-host-a", "LAN_HOST_A_POOL_DIR": "/a/pool", "LAN_HOST_A_BRIDGE": "br0",
		"LAN_HOST_B_IP": "10.77.0.12", "LAN_HOST_B_POOL": "pool-host-b", "LAN_HOST_B_POOL_DIR": "/b/pool", "LAN_HOST_B_BRIDGE": "br0",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range full {
			m[a] = b
		}
		m[k] = v
		return m
	}
	hosts := []Host{
		{Name: "host-a", IP: "10.77.0.11", Pool: "pool-host-a", PoolDir: "/a/pool", Bridge: "br0"},
		{Name: "host-b", IP: "10.77.0.12", Pool: "pool-host-b", PoolDir: "/b/pool", Bridge: "br0"},
	}
	cases := map[string]struct {
		env     map[string]string
		want    *Env
		wantErr bool
	}{
		"Defaults": {env: full, want: &Env{Dir: "/var/lib/provider-kvm-lan", User: "root", SSHPort: 22, KeyFile: "/k", KnownHostsFile: "/kh",
			Socket: "/run/libvirt/libvirt-sock", Hosts: hosts}},
		"OtherPortAndUser": {env: with("LAN_SSH_PORT", "2022"), want: &Env{Dir: "/var/lib/provider-kvm-lan", User: "root", SSHPort: 2022,
			KeyFile: "/k", KnownHostsFile: "/kh", Socket: "/run/libvirt/libvirt-sock", Hosts: hosts}},
		"BadPort":         {env: with("LAN_SSH_PORT", "x"), wantErr: true},
		"HostIncomplete":  {env: with("LAN_HOST_B_POOL", ""), wantErr: true},
		"OneHostIsNotTwo": {env: with("LAN_HOSTS", "host-a"), wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("FromEnv: error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FromEnv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	e := &Env{Dir: "/lan", Socket: "/run/libvirt/libvirt-sock"}
	got := e.Inspect(Host{Name: "host-a", Pool: "pool-host-a", PoolDir: "/lan/host-a/pool"})
	want := [6]string{"host-a", "/lan/host-a/run/libvirt-sock", "pool-host-a", "/lan/host-a/pool", "/lan/host-a/lib", "/lan/host-a/log"}
	if diff := cmp.Diff(want, [6]string{got.Name, got.Socket, got.Pool, got.PoolDir, got.LibDir, got.LogDir}); diff != "" {
		t.Errorf("Inspect (-want +got):\n%s", diff)
	}
}
