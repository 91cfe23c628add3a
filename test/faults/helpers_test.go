package faults

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/imagecache"
)

func TestOwnedMatch(t *testing.T) {
	o := owned{namespaces: []string{"flt-k01"}, digests: []string{"abc123"}}
	cases := map[string]bool{
		"flt-k01_vm":                   true,
		"flt-k01_seed-1234.seed.iso":   true,
		"flt-k010_vm":                  false, // another namespace with the same prefix
		"flt-k02_vm":                   false,
		"pkvm-base-abc123.img.meta":    true,
		"pkvm-base-abc124.img":         false,
		"bootcheck-1-2-root.qcow2":     false,
		"flt-k01":                      false,
		"pkvm-base-abc123.img.owner-0": true,
	}
	for name, want := range cases {
		if got := o.match(name); got != want {
			t.Errorf("match(%q) = %v, want %v", name, got, want)
		}
	}
}

// qcow2File writes a minimal qcow2 header naming backing (none when "").
func qcow2File(t *testing.T, dir, backing string) string {
	t.Helper()
	h := make([]byte, 512)
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:8], 3)
	if backing != "" {
		binary.BigEndian.PutUint64(h[8:16], 256)
		binary.BigEndian.PutUint32(h[16:20], uint32(len(backing)))
		copy(h[256:], backing)
	}
	p := filepath.Join(dir, "overlay.qcow2")
	if err := os.WriteFile(p, h, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestQcow2Backing(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		backing string
		raw     []byte
		want    string
		wantErr bool
	}{
		"Backing":   {backing: "/pool/pkvm-base-x.img", want: "/pool/pkvm-base-x.img"},
		"NoBacking": {},
		"NotQcow2":  {raw: []byte(strings.Repeat("x", 64)), wantErr: true},
		"ShortFile": {raw: []byte("QFI"), wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := qcow2File(t, dir, tc.backing)
			if tc.raw != nil {
				if err := os.WriteFile(p, tc.raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := qcow2Backing(p)
			if (err != nil) != tc.wantErr {
				t.Fatalf("qcow2Backing: error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("qcow2Backing: -want +got:\n%s", diff)
			}
		})
	}
}

func TestCheckBase(t *testing.T) {
	data := []byte("the bytes of a base image")
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	good := imagecache.Record{State: imagecache.RecordPublished, Volume: "base.img", Owner: imagecache.Owner{UID: "u1"}, Verified: true,
		SHA256: sum, SizeBytes: int64(len(data)), VirtualSizeBytes: int64(len(data)), Format: imagecache.FormatRaw}
	cases := map[string]struct {
		marker  *imagecache.Record // nil: no marker
		data    []byte
		wantErr string
	}{
		"Published":   {marker: &good, data: data},
		"NoMarker":    {data: data, wantErr: "no marker"},
		"Claimed":     {marker: with(good, func(r *imagecache.Record) { r.State = imagecache.RecordClaimed }), data: data, wantErr: "marker state"},
		"OtherVolume": {marker: with(good, func(r *imagecache.Record) { r.Volume = "other.img" }), data: data, wantErr: "marker state"},
		"Unverified":  {marker: with(good, func(r *imagecache.Record) { r.Verified = false }), data: data, wantErr: "not verified"},
		"Partial":     {marker: &good, data: data[:10], wantErr: "file holds 10 bytes"},
		"OtherBytes":  {marker: &good, data: []byte(strings.ToUpper(string(data))), wantErr: "file sha256"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "base.img")
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.marker != nil {
				b, err := tc.marker.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p+imagecache.MarkerSuffix, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := checkBase(p, map[string]string{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkBase: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkBase: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func with(r imagecache.Record, f func(*imagecache.Record)) *imagecache.Record {
	f(&r)
	return &r
}
