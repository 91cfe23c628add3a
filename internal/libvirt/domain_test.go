package libvirt

import (
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
)

func TestStateName(t *testing.T) {
	cases := map[golibvirt.DomainState]string{
		golibvirt.DomainNostate:     StateNoState,
		golibvirt.DomainRunning:     StateRunning,
		golibvirt.DomainBlocked:     StateBlocked,
		golibvirt.DomainPaused:      StatePaused,
		golibvirt.DomainShutdown:    StateShuttingDown,
		golibvirt.DomainShutoff:     StateShutOff,
		golibvirt.DomainCrashed:     StateCrashed,
		golibvirt.DomainPmsuspended: StateSuspended,
		golibvirt.DomainState(42):   StateNoState,
	}
	for in, want := range cases {
		if got := StateName(in); got != want {
			t.Errorf("StateName(%d): got %s, want %s", in, got, want)
		}
	}
}

func TestFirstRoutableIPv4(t *testing.T) {
	iface := func(mac string, addrs ...string) golibvirt.DomainInterface {
		i := golibvirt.DomainInterface{Name: "vnet0", Hwaddr: golibvirt.OptString{mac}}
		for _, a := range addrs {
			i.Addrs = append(i.Addrs, golibvirt.DomainIPAddr{Addr: a})
		}
		return i
	}
	cases := map[string]struct {
		ifaces []golibvirt.DomainInterface
		mac    string
		want   string
	}{
		"LeaseOfOurMAC":        {[]golibvirt.DomainInterface{iface("52:54:00:aa:bb:cc", "192.168.122.50")}, "52:54:00:aa:bb:cc", "192.168.122.50"},
		"MACCaseDoesNotMatter": {[]golibvirt.DomainInterface{iface("52:54:00:AA:BB:CC", "192.168.122.50")}, "52:54:00:aa:bb:cc", "192.168.122.50"},
		"OtherMACIgnored":      {[]golibvirt.DomainInterface{iface("52:54:00:00:00:01", "192.168.122.9")}, "52:54:00:aa:bb:cc", ""},
		"SkipsLoopbackLinkLocalAndIPv6": {[]golibvirt.DomainInterface{
			iface("00:00:00:00:00:00", "127.0.0.1", "::1"),
			iface("52:54:00:aa:bb:cc", "fe80::1", "169.254.3.4", "10.0.0.7"),
		}, "", "10.0.0.7"},
		"NothingYet": {nil, "52:54:00:aa:bb:cc", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, FirstRoutableIPv4(tc.ifaces, tc.mac)); diff != "" {
				t.Errorf("FirstRoutableIPv4(): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestUUIDString(t *testing.T) {
	u := golibvirt.UUID{0x6c, 0x1f, 0x0b, 0x6e, 0x3d, 0x2a, 0x4c, 0x55, 0x9f, 0x0e, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f}
	if got, want := uuidString(u), "6c1f0b6e-3d2a-4c55-9f0e-1a2b3c4d5e6f"; got != want {
		t.Errorf("uuidString(): got %s, want %s", got, want)
	}
}

func TestUndefineFlags(t *testing.T) {
	const (
		save  = golibvirt.DomainUndefineManagedSave
		snap  = golibvirt.DomainUndefineSnapshotsMetadata
		nvram = golibvirt.DomainUndefineNvram
		ckpt  = golibvirt.DomainUndefineCheckpointsMetadata
		tpm   = golibvirt.DomainUndefineTpm
	)
	cases := map[string]struct {
		version uint64
		want    golibvirt.DomainUndefineFlagsValues
	}{
		"0.9.3: none":                      {9_003, 0},
		"0.9.4: managed save":              {9_004, save},
		"0.9.5: snapshots metadata":        {9_005, save | snap},
		"1.2.8: still no NVRAM":            {1_002_008, save | snap},
		"1.2.9: NVRAM":                     {1_002_009, save | snap | nvram},
		"5.5.0: no checkpoints metadata":   {5_005_000, save | snap | nvram},
		"5.6.0: checkpoints metadata":      {5_006_000, save | snap | nvram | ckpt},
		"8.0.0 (Ubuntu 22.04): no TPM":     {8_000_000, save | snap | nvram | ckpt},
		"8.9.0: TPM":                       {8_009_000, save | snap | nvram | ckpt | tpm},
		"9.0.0 (Debian 12, the test bed)":  {9_000_000, save | snap | nvram | ckpt | tpm},
		"never the keep flags, 11.0.0 too": {11_000_000, save | snap | nvram | ckpt | tpm},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, UndefineFlags(tc.version)); diff != "" {
				t.Errorf("UndefineFlags(%d): -want +got:\n%s", tc.version, diff)
			}
		})
	}
}
