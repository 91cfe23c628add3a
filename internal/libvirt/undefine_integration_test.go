package libvirt

import (
	"context"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// TestIntegrationUndefineWithSnapshotMetadata checks that UndefineDomain removes a domain
// that has snapshot metadata, which a plain undefine refuses ("cannot delete inactive domain
// with 1 snapshots"), using the flags of the test bed's libvirt version.
func TestIntegrationUndefineWithSnapshotMetadata(t *testing.T) {
	tb := requireTestbed(t)
	c := tb.client()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := uniqueName("undef")
	xml := "<domain type='qemu'><name>" + name + "</name><memory unit='MiB'>32</memory>" +
		"<os><type arch='x86_64'>hvm</type></os></domain>"
	if err := c.DefineDomain(ctx, xml); err != nil {
		t.Fatalf("DefineDomain: %v", err)
	}
	t.Cleanup(func() {
		_ = tb.conn.Do(context.Background(), func(l *golibvirt.Libvirt) error {
			d, err := l.DomainLookupByName(name)
			if err != nil {
				return err
			}
			return l.DomainUndefineFlags(d, UndefineFlags(9_000_000))
		})
	})
	var version uint64
	err := tb.conn.Do(ctx, func(l *golibvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		if version, err = l.ConnectGetLibVersion(); err != nil {
			return err
		}
		// Snapshot metadata alone, as a redefine (a backup tool restoring it) makes it: a
		// domain without disks has nothing to snapshot.
		def, err := l.DomainGetXMLDesc(d, golibvirt.DomainXMLInactive)
		if err != nil {
			return err
		}
		_, err = l.DomainSnapshotCreateXML(d, "<domainsnapshot><name>s1</name><state>shutoff</state>"+
			"<creationTime>1700000000</creationTime>"+def+"</domainsnapshot>", uint32(golibvirt.DomainSnapshotCreateRedefine))
		return err
	})
	if err != nil {
		t.Fatalf("creating a snapshot: %v", err)
	}
	t.Logf("libvirt %d, undefine flags %#x", version, uint32(UndefineFlags(version)))
	plain := tb.conn.Do(ctx, func(l *golibvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		return l.DomainUndefineFlags(d, golibvirt.DomainUndefineNvram)
	})
	if plain == nil {
		t.Fatal("an undefine without the snapshot metadata flag succeeded: the test proves nothing")
	}
	t.Logf("without the metadata flag: %v", plain)
	if err := c.UndefineDomain(ctx, name); err != nil {
		t.Fatalf("UndefineDomain of a domain with a snapshot: %v", err)
	}
	if _, err := c.Domain(ctx, name); !IsNotFound(err) {
		t.Errorf("Domain after UndefineDomain: %v, want IsNotFound", err)
	}
}
