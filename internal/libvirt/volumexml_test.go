package libvirt

import (
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
)

func TestVolumeXML(t *testing.T) {
	cases := map[string]struct {
		spec    VolumeSpec
		want    string
		wantErr bool
	}{
		"EmptyRaw": {
			spec: VolumeSpec{Name: "pkvm-base-0123.img", Format: FormatRaw},
			want: `<volume>
  <name>pkvm-base-0123.img</name>
  <allocation unit="bytes">0</allocation>
  <capacity unit="bytes">0</capacity>
  <target>
    <format type="raw"></format>
  </target>
</volume>`,
		},
		"SizedRaw": {
			spec: VolumeSpec{Name: "m.meta", Format: FormatRaw, CapacityBytes: 321, AllocationBytes: 321},
			want: `<volume>
  <name>m.meta</name>
  <allocation unit="bytes">321</allocation>
  <capacity unit="bytes">321</capacity>
  <target>
    <format type="raw"></format>
  </target>
</volume>`,
		},
		"Overlay": {
			spec: VolumeSpec{Name: "vm-root.qcow2", Format: FormatQCOW2, CapacityBytes: 10 << 30, BackingStorePath: "/pool/pkvm-base-0123.qcow2", BackingStoreFormat: FormatQCOW2},
			want: `<volume>
  <name>vm-root.qcow2</name>
  <allocation unit="bytes">0</allocation>
  <capacity unit="bytes">10737418240</capacity>
  <target>
    <format type="qcow2"></format>
  </target>
  <backingStore>
    <path>/pool/pkvm-base-0123.qcow2</path>
    <format type="qcow2"></format>
  </backingStore>
</volume>`,
		},
		"NoName":              {spec: VolumeSpec{Format: FormatRaw}, wantErr: true},
		"Slash":               {spec: VolumeSpec{Name: "../etc/x", Format: FormatRaw}, wantErr: true},
		"DotDot":              {spec: VolumeSpec{Name: "..", Format: FormatRaw}, wantErr: true},
		"BadFormat":           {spec: VolumeSpec{Name: "x", Format: "vmdk"}, wantErr: true},
		"BackingWithoutFmt":   {spec: VolumeSpec{Name: "x", Format: FormatQCOW2, BackingStorePath: "/b"}, wantErr: true},
		"BackingOnRawOverlay": {spec: VolumeSpec{Name: "x", Format: FormatRaw, BackingStorePath: "/b", BackingStoreFormat: FormatRaw}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := VolumeXML(tc.spec)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("VolumeXML(%+v) = %s, want an error", tc.spec, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("VolumeXML(): -want +got:\n%s", diff)
			}
		})
	}
}

// A volume as libvirt 9.0 dumps it (virsh vol-dumpxml).
const overlayDump = `<volume type='file'>
  <name>vm-root.qcow2</name>
  <key>/var/lib/provider-kvm-testbed/pool/vm-root.qcow2</key>
  <capacity unit='bytes'>1073741824</capacity>
  <allocation unit='bytes'>200704</allocation>
  <physical unit='bytes'>196624</physical>
  <target>
    <path>/var/lib/provider-kvm-testbed/pool/vm-root.qcow2</path>
    <format type='qcow2'/>
    <permissions>
      <mode>0600</mode>
      <owner>0</owner>
      <group>0</group>
    </permissions>
    <timestamps>
      <atime>1796148168.678956370</atime>
      <mtime>1796148168.678133546</mtime>
      <ctime>1796148168.678133546</ctime>
      <btime>0</btime>
    </timestamps>
    <compat>1.1</compat>
    <clusterSize unit='B'>65536</clusterSize>
    <features/>
  </target>
  <backingStore>
    <path>/var/lib/provider-kvm-testbed/pool/pkvm-base-0123.img</path>
    <format type='raw'/>
  </backingStore>
</volume>`

func TestParseVolumeXML(t *testing.T) {
	got, err := ParseVolumeXML("testbed", overlayDump)
	if err != nil {
		t.Fatal(err)
	}
	want := Volume{
		Pool: "testbed", Name: "vm-root.qcow2", Type: "file",
		Key:  "/var/lib/provider-kvm-testbed/pool/vm-root.qcow2",
		Path: "/var/lib/provider-kvm-testbed/pool/vm-root.qcow2", Format: "qcow2",
		CapacityBytes: 1 << 30, AllocationBytes: 200704,
		BackingStorePath: "/var/lib/provider-kvm-testbed/pool/pkvm-base-0123.img", BackingStoreFormat: "raw",
		ModifiedAt: "1796148168.678133546",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseVolumeXML(): -want +got:\n%s", diff)
	}

	got, err = ParseVolumeXML("p", `<volume><name>x</name><capacity unit='KiB'>2</capacity><allocation unit='MB'>3</allocation></volume>`)
	if err != nil || got.CapacityBytes != 2048 || got.AllocationBytes != 3e6 {
		t.Errorf("units: %+v, %v", got, err)
	}
	if _, err := ParseVolumeXML("p", `<volume><name>x</name><capacity unit='parsec'>2</capacity></volume>`); err == nil {
		t.Error("unknown unit: want an error")
	}
	if _, err := ParseVolumeXML("p", `<volume`); err == nil {
		t.Error("bad XML: want an error")
	}
}

func TestParseDomainDisks(t *testing.T) {
	doc := `<domain type='kvm'>
  <name>web-1</name>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/pool/web-1-root.qcow2'/>
      <backingStore type='file'>
        <format type='qcow2'/>
        <source file='/pool/pkvm-base-0123.qcow2'/>
        <backingStore/>
      </backingStore>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='volume' device='cdrom'>
      <source pool='testbed' volume='web-1-seed.iso'/>
      <target dev='sda' bus='sata'/>
    </disk>
    <disk type='block' device='disk'>
      <source dev='/dev/vg/data'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
  </devices>
</domain>`
	got, err := ParseDomainDisks(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []DomainDisk{
		{Domain: "web-1", Target: "vda", Path: "/pool/web-1-root.qcow2", Device: "disk", Format: "qcow2", ChainKnown: true},
		{Domain: "web-1", Target: "vda", Path: "/pool/pkvm-base-0123.qcow2", Backing: true},
		{Domain: "web-1", Target: "sda", Pool: "testbed", Volume: "web-1-seed.iso", Device: "cdrom"},
		{Domain: "web-1", Target: "vdb", Path: "/dev/vg/data", Device: "disk"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseDomainDisks(): -want +got:\n%s", diff)
	}
}

func TestErrorClasses(t *testing.T) {
	wrap := func(code golibvirt.ErrorNumber, msg string) error {
		return errors.Wrap(errors.Wrap(golibvirt.Error{Code: uint32(code), Message: msg}, "inner"), "cannot do X")
	}
	cases := map[string]struct {
		err                    error
		notFound, exists, busy bool
	}{
		"NoVol":      {err: wrap(golibvirt.ErrNoStorageVol, "no vol"), notFound: true},
		"NoPool":     {err: wrap(golibvirt.ErrNoStoragePool, "no pool"), notFound: true},
		"NoDomain":   {err: wrap(golibvirt.ErrNoDomain, "no domain"), notFound: true},
		"VolExists":  {err: wrap(golibvirt.ErrStorageVolExist, "exists"), exists: true},
		"AsyncJobs":  {err: wrap(golibvirt.ErrInternalError, "internal error: pool 'testbed' has asynchronous jobs running."), busy: true},
		"Allocating": {err: wrap(golibvirt.ErrOperationInvalid, "volume 'x' is still being allocated."), busy: true},
		"Internal":   {err: wrap(golibvirt.ErrInternalError, "something else")},
		"Plain":      {err: errors.New("no libvirt error")},
		"Nil":        {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsNotFound(tc.err); got != tc.notFound {
				t.Errorf("IsNotFound = %v", got)
			}
			if got := IsExists(tc.err); got != tc.exists {
				t.Errorf("IsExists = %v", got)
			}
			if got := IsPoolBusy(tc.err); got != tc.busy {
				t.Errorf("IsPoolBusy = %v", got)
			}
		})
	}
}
