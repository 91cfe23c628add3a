package seed

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kdomanski/iso9660"
)

// image is what a reader sees in a seed ISO.
type image struct {
	Label string
	// Files maps names as the library's reader (and Linux isofs) shows
	// them to contents.
	Files map[string][]byte
	// Identifiers are the raw ISO 9660 file identifiers of the root
	// directory, in directory order.
	Identifiers []string
}

// readISO reads a seed image back with the iso9660 library's reader and
// also decodes the root directory records by hand to get the raw
// identifiers.
func readISO(t *testing.T, iso []byte) image {
	t.Helper()
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		t.Fatalf("OpenImage: %v", err)
	}
	label, err := img.Label()
	if err != nil {
		t.Fatalf("Label: %v", err)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatalf("RootDir: %v", err)
	}
	children, err := root.GetChildren()
	if err != nil {
		t.Fatalf("GetChildren: %v", err)
	}
	got := image{Label: strings.TrimRight(label, " "), Files: map[string][]byte{}}
	for _, c := range children {
		if c.IsDir() {
			t.Errorf("unexpected directory %q", c.Name())
			continue
		}
		b, err := io.ReadAll(c.Reader())
		if err != nil {
			t.Fatalf("reading %s: %v", c.Name(), err)
		}
		got.Files[c.Name()] = b
	}

	// ECMA-119 8.4.18: the root directory record sits at byte 156 of the
	// primary volume descriptor; its extent location is at byte 2 (LSB)
	// and its data length at byte 10 (LSB).
	rootRec := iso[pvdOffset+156:]
	loc := int(binary.LittleEndian.Uint32(rootRec[2:6]))
	length := int(binary.LittleEndian.Uint32(rootRec[10:14]))
	dir := iso[loc*sectorSize : loc*sectorSize+length]
	for i := 0; i < len(dir); {
		n := int(dir[i])
		if n == 0 {
			// Records do not cross sectors: skip to the next one.
			i = (i/sectorSize + 1) * sectorSize
			continue
		}
		id := string(dir[i+33 : i+33+int(dir[i+32])])
		if id != "\x00" && id != "\x01" {
			got.Identifiers = append(got.Identifiers, id)
		}
		i += n
	}
	return got
}

// linuxName is the name the Linux isofs driver (map=normal, no Rock Ridge,
// no Joliet) shows for an ISO 9660 file identifier: lower case, without the
// ";1" version and without a trailing dot.
func linuxName(id string) string {
	id = strings.ToLower(id)
	if i := strings.LastIndex(id, ";"); i >= 0 && id[i+1:] == "1" {
		id = id[:i]
	}
	return strings.TrimSuffix(id, ".")
}

const cloudConfig = `#cloud-config
# keep this comment
version: 1.10
packages: [htop]   # trailing comment
write_files:
  - path: /etc/motd
    content: |
      hello
`

const mimeUserData = "Content-Type: multipart/mixed; boundary=\"XYZ\"\nMIME-Version: 1.0\n\n--XYZ\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: [true]\n--XYZ--\n"

func TestBuild(t *testing.T) {
	binaryish := []byte("#!/bin/sh\r\necho hi\r\n\x00\x01\xff\xfe trailing\tbytes\r\n")
	network := []byte("version: 2\nethernets:\n  eth0:\n    dhcp4: true\n")
	userVendor := []byte("#cloud-config\r\nruncmd: [\"echo vendor\"]\r\n")

	cases := map[string]struct {
		in   Input
		want map[string][]byte
	}{
		"CloudConfigVerbatim": {
			in: Input{InstanceID: "vm-1", Hostname: "vm-1", UserData: []byte(cloudConfig)},
			want: map[string][]byte{
				"user-data": []byte(cloudConfig),
				"meta-data": []byte("instance-id: \"vm-1\"\nlocal-hostname: \"vm-1\"\n"),
			},
		},
		"MIMEUserDataVerbatim": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte(mimeUserData)},
			want: map[string][]byte{
				"user-data": []byte(mimeUserData),
				"meta-data": []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
			},
		},
		"BinaryishCRLFUserData": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: binaryish},
			want: map[string][]byte{
				"user-data": binaryish,
				"meta-data": []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
			},
		},
		"EmptyUserDataGetsDefault": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte{}},
			want: map[string][]byte{
				"user-data": []byte(DefaultUserData),
				"meta-data": []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
			},
		},
		"NetworkConfigVerbatim": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig), NetworkConfig: network},
			want: map[string][]byte{
				"user-data":      []byte(cloudConfig),
				"meta-data":      []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
				"network-config": network,
			},
		},
		"EmptyNetworkConfigIsAnEmptyFile": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig), NetworkConfig: []byte{}},
			want: map[string][]byte{
				"user-data":      []byte(cloudConfig),
				"meta-data":      []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
				"network-config": {},
			},
		},
		"UserVendorDataOnly": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig), VendorData: userVendor},
			want: map[string][]byte{
				"user-data":   []byte(cloudConfig),
				"meta-data":   []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
				"vendor-data": userVendor,
			},
		},
		"GuestAgentOnly": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig), InstallGuestAgent: true},
			want: map[string][]byte{
				"user-data":   []byte(cloudConfig),
				"meta-data":   []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
				"vendor-data": []byte(GuestAgentScript),
			},
		},
		"LargeUserData": {
			in: Input{InstanceID: "i", Hostname: "h", UserData: bytes.Repeat([]byte("0123456789abcdef"), 1024)},
			want: map[string][]byte{
				"user-data": bytes.Repeat([]byte("0123456789abcdef"), 1024),
				"meta-data": []byte("instance-id: \"i\"\nlocal-hostname: \"h\"\n"),
			},
		},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Build(tc.in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := readISO(t, s.ISO)
			if got.Label != VolumeLabel {
				t.Errorf("label: got %q, want %q", got.Label, VolumeLabel)
			}
			if diff := cmp.Diff(tc.want, got.Files); diff != "" {
				t.Errorf("files in ISO (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, s.Files); diff != "" {
				t.Errorf("Seed.Files (-want +got):\n%s", diff)
			}

			// What Linux (and so cloud-init) sees, from the raw
			// identifiers.
			var wantIDs, linux []string
			for n := range tc.want {
				wantIDs = append(wantIDs, n+";1")
			}
			sort.Strings(wantIDs)
			for _, id := range got.Identifiers {
				linux = append(linux, linuxName(id))
			}
			if diff := cmp.Diff(wantIDs, got.Identifiers); diff != "" {
				t.Errorf("raw identifiers (-want +got):\n%s", diff)
			}
			for _, n := range linux {
				if _, ok := tc.want[n]; !ok {
					t.Errorf("Linux would show unexpected file %q", n)
				}
			}
			if len(linux) != len(tc.want) {
				t.Errorf("Linux would show %d files, want %d", len(linux), len(tc.want))
			}
		})
	}
}

func TestBuildGuestAgentAndUserVendorData(t *testing.T) {
	cases := map[string][]byte{
		"CloudConfig": []byte("#cloud-config\nruncmd: [\"echo vendor\"]\n# comment\nversion: 1.10\n"),
		"CRLFBinary":  []byte("#!/bin/bash\r\n--==provider-kvm-seed-vendor-data==\r\n\x00\xff\r\n"),
		"Empty":       {},
	}
	for name, userVendor := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Build(Input{InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig), VendorData: userVendor, InstallGuestAgent: true})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := readISO(t, s.ISO)
			vd, ok := got.Files["vendor-data"]
			if !ok {
				t.Fatal("no vendor-data in ISO")
			}
			if diff := cmp.Diff(s.Files["vendor-data"], vd); diff != "" {
				t.Errorf("vendor-data in ISO vs Seed.Files (-want +got):\n%s", diff)
			}
			if !bytes.Contains(bytes.ToLower(vd[:min(len(vd), 4096)]), []byte("mime-version:")) {
				t.Error("cloud-init would not treat vendor-data as MIME: no MIME-Version in the first 4096 bytes")
			}

			want := []mimePart{
				{ContentType: "text/x-shellscript", Body: []byte(GuestAgentScript)},
				{ContentType: "text/plain", Body: userVendor},
			}
			if diff := cmp.Diff(want, parseMultipart(t, vd)); diff != "" {
				t.Errorf("MIME parts (-want +got):\n%s", diff)
			}
		})
	}
}

// mimePart is a decoded part of a multipart message.
type mimePart struct {
	ContentType string
	Body        []byte
}

// parseMultipart parses a multipart/mixed message, decoding base64 bodies.
func parseMultipart(t *testing.T, msg []byte) []mimePart {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(msg))
	if err != nil {
		t.Fatalf("ReadMessage: %v", err)
	}
	if v := m.Header.Get("Mime-Version"); v != "1.0" {
		t.Errorf("MIME-Version: got %q", v)
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("ParseMediaType: %v", err)
	}
	if mt != "multipart/mixed" {
		t.Fatalf("Content-Type: got %q, want multipart/mixed", mt)
	}
	var parts []mimePart
	r := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("NextPart: %v", err)
		}
		ct, _, err := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if err != nil {
			t.Fatalf("part ParseMediaType: %v", err)
		}
		var body io.Reader = p
		if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
			body = base64.NewDecoder(base64.StdEncoding, p)
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("reading part: %v", err)
		}
		parts = append(parts, mimePart{ContentType: ct, Body: b})
	}
	return parts
}

func TestVendorData(t *testing.T) {
	cases := map[string]struct {
		in   Input
		want []byte
	}{
		"Neither":             {in: Input{}, want: nil},
		"UserOnly":            {in: Input{VendorData: []byte("#!/bin/sh\nexit 1\n")}, want: []byte("#!/bin/sh\nexit 1\n")},
		"UserOnlyEmpty":       {in: Input{VendorData: []byte{}}, want: []byte{}},
		"AgentOnly":           {in: Input{InstallGuestAgent: true}, want: []byte(GuestAgentScript)},
		"AgentOnlyNilVendor":  {in: Input{InstallGuestAgent: true, VendorData: nil}, want: []byte(GuestAgentScript)},
		"NeitherWithUserData": {in: Input{UserData: []byte("x")}, want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := VendorData(tc.in)
			if err != nil {
				t.Fatalf("VendorData: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if (tc.want == nil) != (got == nil) {
				t.Errorf("nil-ness: want nil=%t, got nil=%t", tc.want == nil, got == nil)
			}
		})
	}
}

func TestMetaData(t *testing.T) {
	cases := map[string]struct {
		id, host string
		want     string
	}{
		"Simple":  {id: "i-0123", host: "web-1", want: "instance-id: \"i-0123\"\nlocal-hostname: \"web-1\"\n"},
		"YAMLish": {id: "1.10", host: "yes", want: "instance-id: \"1.10\"\nlocal-hostname: \"yes\"\n"},
		"Hostile": {id: "a\"\nb: c", host: "<x>&#", want: "instance-id: \"a\\\"\\nb: c\"\nlocal-hostname: \"<x>&#\"\n"},
		"Empty":   {id: "", host: "", want: "instance-id: \"\"\nlocal-hostname: \"\"\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(MetaData(tc.id, tc.host))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildDeterministic(t *testing.T) {
	ins := map[string]Input{
		"Minimal": {InstanceID: "i", Hostname: "h"},
		"Everything": {
			InstanceID: "i", Hostname: "h", UserData: []byte(cloudConfig),
			NetworkConfig: []byte("version: 2\n"), VendorData: []byte("#cloud-config\n"),
			InstallGuestAgent: true,
		},
	}
	for name, in := range ins {
		t.Run(name, func(t *testing.T) {
			a, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			b, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if a.SHA256 != b.SHA256 || !bytes.Equal(a.ISO, b.ISO) {
				t.Errorf("two builds differ: %s vs %s", a.SHA256, b.SHA256)
			}
			// The volume dates, which the library takes from
			// time.Now(), are pinned to "not specified".
			for _, off := range []int{pvdCreationDate, pvdModificationDate, pvdEffectiveDate} {
				got := a.ISO[pvdOffset+off : pvdOffset+off+pvdDateLen]
				if want := "0000000000000000\x00"; string(got) != want {
					t.Errorf("volume date at %d: got %q, want %q", off, got, want)
				}
			}
		})
	}

	a, _ := Build(ins["Minimal"])
	c, _ := Build(Input{InstanceID: "j", Hostname: "h"})
	if a.SHA256 == c.SHA256 {
		t.Error("different inputs gave the same SHA256")
	}
}

func TestBuildErrors(t *testing.T) {
	secret := []byte("#cloud-config\npassword: hunter2\n")
	cases := map[string]struct {
		in   Input
		want error
	}{
		"NoInstanceID": {in: Input{Hostname: "h", UserData: secret}, want: ErrNoInstanceID},
		"NoHostname":   {in: Input{InstanceID: "i", UserData: secret}, want: ErrNoHostname},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Build(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Build: got error %v, want %v", err, tc.want)
			}
			if s != nil {
				t.Error("Build returned a seed with an error")
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Error("error contains user-data")
			}
		})
	}
}

func TestBuildDoesNotAliasInput(t *testing.T) {
	ud := []byte("#cloud-config\n")
	s, err := Build(Input{InstanceID: "i", Hostname: "h", UserData: ud})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	ud[0] = 'X'
	if s.Files["user-data"][0] != '#' {
		t.Error("Seed.Files aliases Input.UserData")
	}
}

func TestGuestAgentScript(t *testing.T) {
	if !strings.HasPrefix(GuestAgentScript, "#!/bin/sh\n") {
		t.Error("script does not start with #!/bin/sh")
	}
	if !strings.HasSuffix(GuestAgentScript, "\nexit 0\n") {
		t.Error("script does not end with exit 0")
	}
	for i := 0; i < len(GuestAgentScript); i++ {
		if c := GuestAgentScript[i]; c >= 0x80 || c == '\r' {
			t.Fatalf("script byte %d is %q: the MIME part is declared 7bit with LF endings", i, c)
		}
	}
	for _, s := range []string{"apt-get", "dnf", "yum", "zypper", "apk", "systemctl start qemu-guest-agent", "systemctl is-active --quiet qemu-guest-agent", "enable --no-reload qemu-guest-agent", "service qemu-guest-agent start", "rc-service qemu-guest-agent start"} {
		if !strings.Contains(GuestAgentScript, s) {
			t.Errorf("script does not mention %q", s)
		}
	}
	if strings.Contains(GuestAgentScript, mimeBoundary) {
		t.Error("script contains the MIME boundary")
	}
}

func BenchmarkBuild(b *testing.B) {
	in := Input{
		InstanceID:        "bench",
		Hostname:          "bench",
		UserData:          append([]byte("#cloud-config\n"), bytes.Repeat([]byte("# 0123456789abcdef\n"), 16*1024/19)...),
		NetworkConfig:     []byte("version: 2\n"),
		InstallGuestAgent: true,
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(in); err != nil {
			b.Fatal(err)
		}
	}
}
