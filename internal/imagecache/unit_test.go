package imagecache

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestVolumeName(t *testing.T) {
	a := Source{URL: "https://cloud.example/img.qcow2", SHA256: strings.Repeat("a", 64)}
	n := VolumeName(a)
	// One volume per digest: the name is the digest's, whatever the URL.
	if want := "pkvm-base-" + a.SHA256 + ".qcow2"; n != want {
		t.Errorf("VolumeName = %q, want %q", n, want)
	}
	if !IsVolumeName(n) {
		t.Errorf("IsVolumeName(%q) = false", n)
	}
	b := a
	b.SHA256 = strings.Repeat("b", 64)
	c := a
	c.URL += "?v=2"
	d := a
	d.Format = FormatRaw
	if VolumeName(b) == n {
		t.Error("another digest gives the same volume")
	}
	if VolumeName(c) != n {
		t.Error("another URL with the same digest gives another volume")
	}
	if got := VolumeName(d); !strings.HasSuffix(got, ".img") || !IsVolumeName(got) {
		t.Errorf("raw VolumeName = %q", got)
	}
	for _, bad := range []string{strings.Repeat("A", 64), strings.Repeat("a", 63), "../../etc/passwd" + strings.Repeat("a", 48)} {
		if got := VolumeName(Source{URL: a.URL, SHA256: bad}); got != "" {
			t.Errorf("VolumeName with sha256 %q = %q, want none from input that is not a digest", bad, got)
		}
	}
	if got := VolumeName(Source{URL: a.URL}); got != "" {
		t.Errorf("VolumeName of an unpinned source = %q, want none before hashing", got)
	}
	if got := ExternalName(Source{URL: a.URL}); !strings.HasPrefix(got, "pkvm-unpinned-") || IsVolumeName(got) || ExternalName(Source{URL: a.URL}) != got {
		t.Errorf("ExternalName of an unpinned source = %q, want a deterministic name that is no volume's", got)
	}
	if ExternalName(a) != n {
		t.Errorf("ExternalName of a pinned source = %q, want its volume %q", ExternalName(a), n)
	}
	// Volumes named by releases before shared images are still recognized.
	h := sha256.Sum256([]byte(a.URL + "\n" + a.SHA256))
	legacy := "pkvm-base-" + hex.EncodeToString(h[:])[:24] + ".qcow2"
	if !IsVolumeName(legacy) {
		t.Errorf("IsVolumeName(%q) = false for a name of an earlier release", legacy)
	}
	// A name is a digest name by its hex part, whatever its extension: a legacy .qcow2 name
	// is one character longer than a legacy .img name, and is no digest name either.
	for name, want := range map[string]bool{
		n:      true,
		legacy: false,
		"pkvm-base-" + hex.EncodeToString(h[:])[:24] + ".img":   false,
		"pkvm-base-" + hex.EncodeToString(h[:]) + ".qcow2":      true,
		"pkvm-base-" + hex.EncodeToString(h[:])[:25] + ".qcow2": false,
	} {
		if got := isDigestName(name); got != want {
			t.Errorf("isDigestName(%q) = %v, want %v", name, got, want)
		}
	}
	if MarkerName(n) != n+".meta" || ClaimName(n) != n+".claim" {
		t.Error("marker/claim names")
	}
	o1, o2 := OwnerName(n, "uid-1"), OwnerName(n, "uid-2")
	if o1 == o2 || !strings.HasPrefix(o1, n+".owner-") || strings.Contains(o1, "uid-1") {
		t.Errorf("OwnerName = %q, %q: want one per UID, derived, not the raw UID", o1, o2)
	}
	for _, name := range []string{n + ".meta", n + ".claim", n, o1, legacy + ".claim", OwnerName(legacy, "u")} {
		want := n
		if strings.HasPrefix(name, legacy) {
			want = legacy
		}
		if got, ok := dataVolumeOf(name); !ok || got != want {
			t.Errorf("dataVolumeOf(%q) = %q, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"pkvm-base-xyz.qcow2", "vm-root.qcow2", "pkvm-base-" + strings.Repeat("A", 24) + ".img", "pkvm-base-" + strings.Repeat("a", 24) + ".iso",
		"pkvm-base-" + strings.Repeat("a", 40) + ".qcow2"} {
		if IsVolumeName(bad) {
			t.Errorf("IsVolumeName(%q) = true", bad)
		}
	}
	for _, bad := range []string{n + ".owner-xyz", n + ".owner-" + strings.Repeat("a", 31), "vm.qcow2.owner-" + strings.Repeat("a", 32)} {
		if _, ok := ownerRecordOf(bad); ok {
			t.Errorf("ownerRecordOf(%q) = true", bad)
		}
	}
}

func TestSourceValidate(t *testing.T) {
	good := []Source{
		{URL: "https://x.example/a.img"},
		{URL: "http://127.0.0.1:8080/a", SHA256: strings.Repeat("0", 64), Format: FormatRaw},
	}
	for _, s := range good {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", s, err)
		}
	}
	bad := []Source{
		{URL: "ftp://x/a"}, {URL: "/a"}, {URL: "https://"},
		{URL: "https://x/a", SHA256: strings.Repeat("A", 64)},
		{URL: "https://x/a", SHA256: "abc"},
		{URL: "https://x/a", Format: "vmdk"},
	}
	for _, s := range bad {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s)
		}
	}
	if err := (Source{URL: "ftp://user:secret@x/a"}).Validate(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password: %v", err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{
		State: RecordPublished, Volume: "pkvm-base-0.qcow2",
		Owner:     Owner{UID: "5f0c", Namespace: "default", Name: "debian"},
		SourceURL: "https://x/a", FinalURL: "https://mirror/a",
		ExpectedSHA256: strings.Repeat("c", 64), SHA256: strings.Repeat("c", 64), Verified: true,
		Format: FormatQCOW2, SizeBytes: 123, VirtualSizeBytes: 1 << 30,
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"schema":1,"kind":"provider-kvm.crossplane.io/BaseImageVolume","state":"published","volume":"pkvm-base-0.qcow2",` +
		`"owner":{"uid":"5f0c","namespace":"default","name":"debian"},"sourceURL":"https://x/a","finalURL":"https://mirror/a",` +
		`"expectedSHA256":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc","sha256":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",` +
		`"verified":true,"format":"qcow2","sizeBytes":123,"virtualSizeBytes":1073741824,"time":"2026-01-02T03:04:05Z"}` + "\n"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("Encode: -want +got:\n%s", diff)
	}
	got, err := DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Schema, r.Kind = SchemaVersion, recordKind
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("DecodeRecord: -want +got:\n%s", diff)
	}

	// Every strict prefix of a record (a torn upload) is unusable.
	for i := 0; i < len(b)-1; i++ {
		if _, err := DecodeRecord(b[:i]); err == nil {
			t.Fatalf("DecodeRecord of a %d-byte prefix succeeded", i)
		}
	}
	// So is a prefix padded with the zeros of a sparse volume.
	if _, err := DecodeRecord(append(b[:len(b)/2:len(b)/2], make([]byte, len(b))...)); err == nil {
		t.Error("DecodeRecord of a zero-padded prefix succeeded")
	}

	bad := map[string]func(*Record){
		"NoOwner":   func(r *Record) { r.Owner.UID = "" },
		"BadState":  func(r *Record) { r.State = "done" },
		"NoDigest":  func(r *Record) { r.SHA256 = "" },
		"NoSize":    func(r *Record) { r.SizeBytes = 0 },
		"BadFormat": func(r *Record) { r.Format = "vmdk" },
		"NewSchema": func(r *Record) { r.Schema = 2 },
		"OtherKind": func(r *Record) { r.Kind = "x" },
	}
	for name, mut := range bad {
		t.Run(name, func(t *testing.T) {
			c := got
			mut(&c)
			cb, _ := jsonRaw(c)
			d, err := DecodeRecord(cb)
			if err == nil {
				t.Fatal("DecodeRecord succeeded")
			}
			if name != "NoOwner" && d.Owner.UID != "5f0c" {
				t.Errorf("owner of an unusable record not kept: %+v", d.Owner)
			}
		})
	}
	claim := Record{State: RecordClaimed, Volume: "v", Owner: Owner{UID: "u"}}
	cb, _ := claim.Encode()
	if _, err := DecodeRecord(cb); err != nil {
		t.Errorf("claim record: %v", err)
	}
}

func TestDigestMismatchMessage(t *testing.T) {
	want, got := strings.Repeat("a", 64), strings.Repeat("b", 64)
	err := error(&DigestMismatchError{URL: "https://x/a.qcow2", Want: want, Got: got})
	msg := err.Error()
	for _, s := range []string{want, got, "https://x/a.qcow2", "nothing was published", "source.sha256"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q: %s", s, msg)
		}
	}
	if !IsDigestMismatch(wrapErr(err)) || !IsTerminal(wrapErr(err)) {
		t.Error("IsDigestMismatch/IsTerminal through wrapping")
	}
	if IsDigestMismatch(&FormatError{}) {
		t.Error("IsDigestMismatch(FormatError)")
	}
	if !IsOwnedByOther(wrapErr(&OwnedByOtherError{Owner: Owner{UID: "u"}})) || !IsInUse(wrapErr(&InUseError{Users: []string{"x"}})) {
		t.Error("IsOwnedByOther/IsInUse through wrapping")
	}
	o := (&OwnedByOtherError{Pool: "p", Volume: "v", Owner: Owner{UID: "u1", Namespace: "ns", Name: "img"}}).Error()
	if strings.Contains(o, "u1") || strings.Contains(o, "ns/img") {
		t.Errorf("OwnedByOtherError names the other BaseImage, which may be of another namespace: %s", o)
	}
	if u := (&InUseError{Pool: "p", Volume: "v", Doubts: []string{"pool cold is inactive"}}).Error(); !strings.Contains(u, "cannot rule out") || !strings.Contains(u, "pool cold is inactive") {
		t.Errorf("InUseError does not say why it cannot be sure: %s", u)
	}
	if c := (&ChangedError{URL: "https://x/a", First: want, Second: got}); IsTerminal(c) || IsDigestMismatch(c) {
		t.Error("ChangedError is terminal: the server changed the file, a retry may see one version twice")
	}
	if u := (&InUseError{Pool: "p", Volume: "v", Users: []string{"volume p/ns_a", "domain ns_d disk vda"}, Namespace: "ns"}).Error(); !strings.Contains(u, "volume p/ns_a, domain ns_d disk vda") {
		t.Errorf("InUseError does not name its own namespace's users: %s", u)
	}
	for code, terminal := range map[int]bool{404: true, 403: true, 408: false, 429: false, 500: false, 503: false} {
		if got := IsTerminal(&HTTPStatusError{StatusCode: code}); got != terminal {
			t.Errorf("IsTerminal(HTTP %d) = %v", code, got)
		}
	}
}
