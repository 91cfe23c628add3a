package domainxml

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func baseSpec() Spec {
	return Spec{
		Name: "team-a_proxy-1", Type: "qemu", VCPU: 2, MemoryMiB: 1024, Firmware: FirmwareUEFI,
		RootDisk:   Volume{Pool: "default", Name: "team-a_proxy-1-root.qcow2"},
		Seed:       &Volume{Pool: "default", Name: "team-a_proxy-1-seed.iso"},
		Network:    "default",
		MAC:        "52:54:00:12:34:56",
		ConsoleLog: "/var/log/libvirt/qemu/team-a_proxy-1-console.log",
		Owner:      Owner{UID: "6c1f0b6e-3d2a-4c55-9f0e-1a2b3c4d5e6f", Namespace: "team-a", Name: "proxy-1", ProviderConfig: "ClusterProviderConfig/default"},
	}
}

// TestDomainGolden compares the rendered XML with reviewed files in testdata/. Run
// `go test ./internal/domainxml -update` after an intended change and review the diff.
func TestDomainGolden(t *testing.T) {
	cases := map[string]func(*Spec){
		"uefi-qemu-network": func(*Spec) {},
		"bios-kvm-bridge": func(s *Spec) {
			s.Type, s.Firmware, s.Network, s.Bridge = "kvm", FirmwareBIOS, "", "br0"
		},
		"kvm-cpumode-noseed": func(s *Spec) {
			s.Type, s.CPUMode, s.Seed, s.ConsoleLog = "kvm", "host-model", nil, ""
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			mod(&s)
			got, err := Domain(s)
			if err != nil {
				t.Fatalf("Domain(): %v", err)
			}
			file := filepath.Join("testdata", name+".xml")
			if *update {
				if err := os.WriteFile(file, []byte(got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("golden file: %v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(strings.TrimSpace(string(want)), got); diff != "" {
				t.Errorf("Domain(): -want, +got:\n%s", diff)
			}
		})
	}
}

// TestDomainInvariants checks the points that broke guests elsewhere, independent of layout.
func TestDomainInvariants(t *testing.T) {
	got, err := Domain(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`machine="q35"`,
		`<os firmware="efi">`,
		`<feature enabled="no" name="secure-boot">`,
		`<feature enabled="no" name="enrolled-keys">`,
		`<target dev="sda" bus="scsi">`,                // seed cdrom on SCSI ...
		`<controller type="scsi" model="virtio-scsi">`, // ... on virtio-scsi, not SATA/AHCI
		`<readonly>`,
		`name="org.qemu.guest_agent.0"`,
		`<rng model="virtio">`,
		`<mac address="52:54:00:12:34:56">`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	if strings.Contains(got, `bus="sata"`) || strings.Contains(got, `bus="ide"`) {
		t.Error("domain XML uses a SATA/IDE bus that Debian's cloud kernels cannot see")
	}
}

func TestDomainErrors(t *testing.T) {
	cases := map[string]struct {
		mod  func(*Spec)
		want string
	}{
		"NoName":      {func(s *Spec) { s.Name = "" }, errNoName},
		"NoOwner":     {func(s *Spec) { s.Owner.UID = "" }, errNoOwner},
		"NoDisk":      {func(s *Spec) { s.RootDisk = Volume{} }, errNoDisk},
		"TwoNetworks": {func(s *Spec) { s.Bridge = "br0" }, errNetwork},
		"NoNetwork":   {func(s *Spec) { s.Network = "" }, errNetwork},
		"BadFirmware": {func(s *Spec) { s.Firmware = "coreboot" }, `unknown firmware "coreboot"`},
		"BadType":     {func(s *Spec) { s.Type = "xen" }, `unknown domain type "xen"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			tc.mod(&s)
			_, err := Domain(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Domain(): want error %q, got %v", tc.want, err)
			}
		})
	}
}

func TestOwnerOf(t *testing.T) {
	ours, err := Domain(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	want := baseSpec().Owner
	want.ManagedBy = ManagedBy
	want.XMLName.Space, want.XMLName.Local = Namespace, "owner"

	cases := map[string]struct {
		xml  string
		want *Owner
	}{
		"Ours":                      {ours, &want},
		"Foreign":                   {`<domain type="kvm"><name>team-a_proxy-1</name></domain>`, nil},
		"OtherApplicationsMetadata": {`<domain type="kvm"><name>x</name><metadata><app:x xmlns:app="https://example.org/app"><uid>1</uid></app:x></metadata></domain>`, nil},
		"OursNextToOthers": {`<domain type="kvm"><name>x</name><metadata><app:x xmlns:app="https://example.org/app"/>` +
			`<kvm:owner xmlns:kvm="` + Namespace + `"><managedBy>provider-kvm</managedBy><uid>abc</uid><namespace>ns</namespace><name>n</name></kvm:owner></metadata></domain>`,
			&Owner{XMLName: want.XMLName, ManagedBy: ManagedBy, UID: "abc", Namespace: "ns", Name: "n"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := OwnerOf(tc.xml)
			if err != nil {
				t.Fatalf("OwnerOf(): %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("OwnerOf(): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestMAC(t *testing.T) {
	re := regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`)
	a, b := MAC("uid-a"), MAC("uid-b")
	if !re.MatchString(a) || !re.MatchString(b) {
		t.Fatalf("MAC(): %q, %q do not look like 52:54:00:xx:xx:xx", a, b)
	}
	if a != MAC("uid-a") {
		t.Error("MAC() is not stable for the same UID")
	}
	if a == b {
		t.Error("MAC() gives two UIDs the same address")
	}
}

func TestMACOf(t *testing.T) {
	x, err := Domain(Spec{Name: "ns_vm", Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "uefi",
		RootDisk: Volume{Pool: "p", Name: "root.qcow2"}, Network: "default", MAC: "52:54:00:AA:bb:cc", Owner: Owner{UID: "u", Namespace: "ns", Name: "vm"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := MACOf(x)
	if err != nil || got != "52:54:00:aa:bb:cc" {
		t.Errorf("MACOf() = %q, %v; want 52:54:00:aa:bb:cc", got, err)
	}
	if got, _ := MACOf("<domain type='kvm'><name>x</name></domain>"); got != "" {
		t.Errorf("MACOf(no devices) = %q, want empty", got)
	}
	if _, err := MACOf("<domain"); err == nil {
		t.Error("MACOf(bad XML) = nil error")
	}
}

func TestMACTaken(t *testing.T) {
	dom := func(name, uid, mac string, bridge bool) string {
		s := Spec{Name: name, Type: "qemu", VCPU: 1, MemoryMiB: 256, Firmware: "bios", RootDisk: Volume{Pool: "p", Name: name + ".qcow2"},
			Network: "default", MAC: mac, Owner: Owner{UID: uid, Namespace: "ns", Name: name}}
		if bridge {
			s.Network, s.Bridge = "", "br0"
		}
		x, err := Domain(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	unmarked := `<domain type='kvm'><name>platform-dns</name><devices><interface type='bridge'><mac address='52:54:00:AA:BB:CC'/><source bridge='br0'/></interface></devices></domain>`
	defs := []string{dom("a", "uid-a", "52:54:00:00:00:01", false), dom("b", "uid-b", "52:54:00:00:00:02", true), unmarked}
	cases := map[string]struct {
		reason string
		mac    string
		uid    string
		want   bool
	}{
		"Free":         {reason: "an address no domain has is free", mac: "52:54:00:00:00:03", uid: "uid-c"},
		"Ours":         {reason: "the resource's own domain does not count", mac: "52:54:00:00:00:01", uid: "uid-a"},
		"Another":      {reason: "another resource's domain has it", mac: "52:54:00:00:00:02", uid: "uid-c", want: true},
		"UnmarkedCase": {reason: "a domain the provider does not manage counts too, whatever the case", mac: "52:54:00:aa:bb:cc", uid: "uid-c", want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := MACTaken(defs, tc.mac, tc.uid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s: MACTaken() = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestAttachmentOf(t *testing.T) {
	x := `<domain type='kvm'><name>d</name><devices>` +
		`<interface type='network'><mac address='52:54:00:00:00:01'/><source network='default' bridge='virbr0'/></interface>` +
		`<interface type='bridge'><mac address='52:54:00:00:00:02'/><source bridge='br0'/></interface>` +
		`<interface type='user'><mac address='52:54:00:00:00:03'/></interface></devices></domain>`
	cases := map[string]struct {
		mac             string
		network, bridge string
	}{
		"First":   {network: "default"},
		"Network": {mac: "52:54:00:00:00:01", network: "default"},
		"Bridge":  {mac: "52:54:00:00:00:02", bridge: "br0"},
		"Other":   {mac: "52:54:00:00:00:03"},
		"None":    {mac: "52:54:00:00:00:09"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, b, err := AttachmentOf(x, tc.mac)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.network || b != tc.bridge {
				t.Errorf("AttachmentOf() = %q, %q, want %q, %q", n, b, tc.network, tc.bridge)
			}
		})
	}
}
