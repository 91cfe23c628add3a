package imagefetch

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

// qcow2Head is the first 512 bytes of a qcow2 image: a valid header of version 2 or 3
// (header_length 104, 64 KiB clusters), changed by mods.
func qcow2Head(version uint32, backing, size uint64, crypt uint32, mods ...func(b []byte)) []byte {
	b := make([]byte, 512)
	copy(b, qcow2Magic)
	binary.BigEndian.PutUint32(b[4:], version)
	binary.BigEndian.PutUint64(b[8:], backing)
	binary.BigEndian.PutUint32(b[20:], 16)
	binary.BigEndian.PutUint64(b[24:], size)
	binary.BigEndian.PutUint32(b[32:], crypt)
	if version >= 3 {
		binary.BigEndian.PutUint32(b[96:], 4)
		binary.BigEndian.PutUint32(b[100:], qcow2V3HeaderLen)
	}
	for _, m := range mods {
		m(b)
	}
	return b
}

// incompatible sets the incompatible_features of a version 3 header.
func incompatible(bits uint64) func([]byte) {
	return func(b []byte) { binary.BigEndian.PutUint64(b[72:], bits) }
}

// put32 sets the 32-bit field at off.
func put32(off int, v uint32) func([]byte) {
	return func(b []byte) { binary.BigEndian.PutUint32(b[off:], v) }
}

func TestCheckFormat(t *testing.T) {
	type args struct {
		f    Format
		head []byte
	}
	type want struct {
		virtual int64
		err     string // a part of the error message; "" for none
	}
	// compression type zstd: header_length 112 with byte 104 set.
	zstd := func(b []byte) {
		binary.BigEndian.PutUint32(b[100:], 112)
		b[104] = 1
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"QCOW2v3": {
			reason: "A plain version 3 image gives its virtual size.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 10<<30, 0)},
			want:   want{virtual: 10 << 30},
		},
		"QCOW2v2": {
			reason: "A version 2 image has no fields after byte 72.",
			args:   args{f: FormatQCOW2, head: qcow2Head(2, 0, 1<<20, 0)},
			want:   want{virtual: 1 << 20},
		},
		"QCOW2v2Short": {
			reason: "72 bytes are a whole version 2 header.",
			args:   args{f: FormatQCOW2, head: qcow2Head(2, 0, 1<<20, 0)[:72]},
			want:   want{virtual: 1 << 20},
		},
		"DefaultQCOW2": {
			reason: "An empty format means qcow2.",
			args:   args{f: "", head: qcow2Head(3, 0, 5, 0)},
			want:   want{virtual: 5},
		},
		"Raw": {
			reason: "Raw images are not parsed.",
			args:   args{f: FormatRaw, head: []byte("\x00\x00\x00 plain disk")},
		},
		"RawEmpty": {
			reason: "An empty raw image is raw.",
			args:   args{f: FormatRaw},
		},
		"NotQCOW2": {
			reason: "An HTML error page is not a qcow2 image.",
			args:   args{f: FormatQCOW2, head: []byte("<html>not found</html>")},
			want:   want{err: "declared qcow2 but is not"},
		},
		"Short": {
			reason: "An image that ends within the version 2 header is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0)[:40]},
			want:   want{err: "ends within its qcow2 header (40 bytes)"},
		},
		"ShortV3": {
			reason: "A version 3 image that ends within its 104-byte header is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0)[:90]},
			want:   want{err: "ends within its qcow2 version 3 header (90 bytes)"},
		},
		"ShortV3LongHeader": {
			reason: "A version 3 image that ends within its announced header_length is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, zstd)[:108]},
			want:   want{err: "ends within its qcow2 header of 112 bytes"},
		},
		"HeaderLengthTooSmall": {
			reason: "Version 3 needs header_length 104 or more.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, put32(100, 72))},
			want:   want{err: "header_length 72 is invalid"},
		},
		"HeaderLengthNotAligned": {
			reason: "header_length is a multiple of 8.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, put32(100, 108))},
			want:   want{err: "header_length 108 is invalid"},
		},
		"HeaderLengthBeyondCluster": {
			reason: "The header fits in the first cluster.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, put32(20, 9), put32(100, 1024))},
			want:   want{err: "header_length 1024 exceeds the cluster size 512"},
		},
		"ClusterBits": {
			reason: "cluster_bits outside 9..21 is invalid.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, put32(20, 30))},
			want:   want{err: "cluster_bits 30 is invalid"},
		},
		"RefcountOrder": {
			reason: "refcount_order above 6 is invalid.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, put32(96, 7))},
			want:   want{err: "refcount_order 7 is invalid"},
		},
		"Backing": {
			reason: "A base image with a backing file is not self-contained.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 512, 5, 0)},
			want:   want{err: "backing file"},
		},
		"BackingV2": {
			reason: "Version 2 images are checked for a backing file too.",
			args:   args{f: FormatQCOW2, head: qcow2Head(2, 512, 5, 0)},
			want:   want{err: "backing file"},
		},
		"Encrypted": {
			reason: "Encrypted images are refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 1)},
			want:   want{err: "encrypted (crypt_method 1)"},
		},
		"EncryptedLUKS": {
			reason: "LUKS encryption (crypt_method 2) is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 2)},
			want:   want{err: "encrypted (crypt_method 2)"},
		},
		"Dirty": {
			reason: "A dirty image needs a refcount repair first.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<0))},
			want:   want{err: `incompatible feature "dirty" (bit 0)`},
		},
		"Corrupt": {
			reason: "An image marked corrupt must not boot.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<1))},
			want:   want{err: `incompatible feature "corrupt" (bit 1): QEMU marked it corrupt`},
		},
		"ExternalDataFile": {
			reason: "An image whose data is in an external file is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<2))},
			want:   want{err: `incompatible feature "external data file" (bit 2)`},
		},
		"CompressionTypeZstd": {
			reason: "zstd compressed clusters are fine.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<3), zstd)},
			want:   want{virtual: 5},
		},
		"CompressionTypeUnknown": {
			reason: "An unknown compression_type is refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<3), zstd, func(b []byte) { b[104] = 9 })},
			want:   want{err: "unknown compression_type 9"},
		},
		"ExtendedL2": {
			reason: "Subclusters are fine.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<4))},
			want:   want{virtual: 5},
		},
		"UnknownIncompatible": {
			reason: "An unknown incompatible feature bit is refused, named by its number.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<5))},
			want:   want{err: "unknown incompatible feature bit 5"},
		},
		"UnknownIncompatibleHigh": {
			reason: "Bit 63 is as unknown as bit 5; all refusals are named.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, incompatible(1<<63|1<<1))},
			want:   want{err: `incompatible feature "corrupt" (bit 1): QEMU marked it corrupt; an image marked corrupt must not boot; unknown incompatible feature bit 63`},
		},
		"CompatibleAndAutoclearIgnored": {
			reason: "Compatible and autoclear features may be ignored by readers.",
			args: args{f: FormatQCOW2, head: qcow2Head(3, 0, 5, 0, func(b []byte) {
				binary.BigEndian.PutUint64(b[80:], ^uint64(0))
				binary.BigEndian.PutUint64(b[88:], ^uint64(0))
			})},
			want: want{virtual: 5},
		},
		"Version4": {
			reason: "Versions other than 2 and 3 are refused.",
			args:   args{f: FormatQCOW2, head: qcow2Head(4, 0, 5, 0)},
			want:   want{err: "version 4"},
		},
		"ZeroSize": {
			reason: "A virtual size of 0 is invalid.",
			args:   args{f: FormatQCOW2, head: qcow2Head(3, 0, 0, 0)},
			want:   want{err: "virtual size"},
		},
		"RawIsQCOW2": {
			reason: "A qcow2 image declared raw would boot as a disk full of qcow2 metadata.",
			args:   args{f: FormatRaw, head: qcow2Head(3, 0, 5, 0)},
			want:   want{err: "set format: qcow2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v, err := checkFormat(tc.args.f, tc.args.head)
			got := want{virtual: v}
			if err != nil {
				got = want{err: tc.want.err}
				if !strings.Contains(err.Error(), tc.want.err) || tc.want.err == "" {
					got.err = err.Error()
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s\ncheckFormat(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestImageStream(t *testing.T) {
	img := append(qcow2Head(3, 0, 7<<30, 0), bytes.Repeat([]byte("0123456789abcdef"), 300000)...) // ~4.8 MB
	sum := sha256.Sum256(img)
	var calls [][2]int64
	s := newImageStream(iotest.HalfReader(bytes.NewReader(img)), FormatQCOW2, int64(len(img)), 0, 0, 0, nil,
		func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
	var out bytes.Buffer
	// Read like go-libvirt: into a 4 MiB buffer, one packet per Read.
	buf := make([]byte, 4<<20)
	packets := 0
	for {
		n, err := s.Read(buf)
		if n > 0 {
			packets++
			if n > chunkSize {
				t.Fatalf("Read returned %d bytes, more than a chunk", n)
			}
			out.Write(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	if !bytes.Equal(out.Bytes(), img) {
		t.Fatal("stream altered the bytes")
	}
	if s.sum() != hex.EncodeToString(sum[:]) || s.n != int64(len(img)) || s.virtualSize != 7<<30 {
		t.Errorf("sum %s n %d virtual %d", s.sum(), s.n, s.virtualSize)
	}
	if want := (len(img) + chunkSize - 1) / chunkSize; packets != want {
		t.Errorf("%d packets, want %d full chunks", packets, want)
	}
	if len(calls) == 0 || calls[len(calls)-1] != [2]int64{int64(len(img)), int64(len(img))} {
		t.Errorf("progress calls %v: want a final one with done == total", calls)
	}

	// A source that fails mid-way fails the stream with its error.
	s = newImageStream(io.MultiReader(bytes.NewReader(img[:3<<20]), iotest.ErrReader(io.ErrUnexpectedEOF)), FormatQCOW2, 0, 0, 0, 0, nil, nil)
	_, err := io.Copy(io.Discard, struct{ io.Reader }{s})
	s.close()
	if err != io.ErrUnexpectedEOF {
		t.Errorf("stream error = %v, want the source's", err)
	}

	// A non-qcow2 image declared qcow2 fails at the first chunk.
	s = newImageStream(strings.NewReader("<html>oops</html>"), FormatQCOW2, 0, 0, 0, 0, nil, nil)
	_, err = io.Copy(io.Discard, struct{ io.Reader }{s})
	s.close()
	if !IsFormatError(err) {
		t.Errorf("stream error = %v, want a FormatError", err)
	}

	// Stopping the stream early ends the producer.
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(img) }()
	s = newImageStream(pr, FormatQCOW2, 0, 0, 0, 0, nil, nil)
	if _, err := s.Read(buf); err != nil {
		t.Fatal(err)
	}
	_ = pr.Close()
	s.close()

	// A stalled source triggers the stall callback.
	pr, pw = io.Pipe()
	defer pw.Close()
	stalled := make(chan struct{})
	s = newImageStream(pr, FormatRaw, 0, 0, 0, 50*time.Millisecond, func() { close(stalled); _ = pw.CloseWithError(errStalled) }, nil)
	select {
	case <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("stall not detected")
	}
	_, err = io.Copy(io.Discard, struct{ io.Reader }{s})
	s.close()
	if err != errStalled {
		t.Errorf("stalled stream error = %v", err)
	}
}

// TestCheckFormatQEMUImages checks headers written by qemu-img itself, when it is installed.
func TestCheckFormatQEMUImages(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	dir := t.TempDir()
	cases := map[string]struct {
		reason string
		opts   string // qemu-img create -o
		err    string // a part of the error; "" for none
	}{
		"Compat010":  {reason: "A version 2 image (compat=0.10) is accepted.", opts: "compat=0.10"},
		"Compat11":   {reason: "A version 3 image (compat=1.1) is accepted.", opts: "compat=1.1"},
		"Zstd":       {reason: "zstd compression is a known incompatible feature.", opts: "compression_type=zstd"},
		"ExtendedL2": {reason: "Subclusters are a known incompatible feature.", opts: "extended_l2=on,cluster_size=128k"},
		"DataFile":   {reason: "An external data file is refused.", opts: "data_file=" + filepath.Join(dir, "data.raw"), err: `"external data file" (bit 2)`},
		"Backing":    {reason: "A backing file is refused.", opts: "backing_file=" + filepath.Join(dir, "Compat11.qcow2") + ",backing_fmt=qcow2", err: "backing file"},
	}
	for _, name := range []string{"Compat010", "Compat11", "Zstd", "ExtendedL2", "DataFile", "Backing"} {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name+".qcow2")
			if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-o", tc.opts, p, "64M").CombinedOutput(); err != nil {
				t.Skipf("qemu-img create -o %s: %v\n%s", tc.opts, err, out)
			}
			head, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			v, err := checkFormat(FormatQCOW2, head)
			switch {
			case tc.err == "" && (err != nil || v != 64<<20):
				t.Errorf("%s\ncheckFormat() = %d, %v; want %d", tc.reason, v, err, 64<<20)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%s\ncheckFormat() error = %v, want one containing %q", tc.reason, err, tc.err)
			}
		})
	}
}

// The stream keeps the digests of the blocks Publish reads back before marking a volume:
// the first, those at powers of two and the last (here a short one).
func TestImageStreamSamples(t *testing.T) {
	img := make([]byte, 5<<20+123)
	for i := range img {
		img[i] = byte(i * 7)
	}
	for _, total := range []int64{int64(len(img)), 0} {
		s := newImageStream(iotest.HalfReader(bytes.NewReader(img)), FormatRaw, total, 0, 0, 0, nil, nil)
		if _, err := io.Copy(io.Discard, s); err != nil {
			t.Fatal(err)
		}
		s.close()
		var got []int64
		for _, b := range s.samples {
			got = append(got, b.Offset)
			if want := sha256.Sum256(img[b.Offset : b.Offset+int64(b.Len)]); b.Sum != want {
				t.Errorf("total %d: sample at %d has the wrong digest", total, b.Offset)
			}
		}
		if diff := cmp.Diff([]int64{0, 1 << 20, 2 << 20, 4 << 20, 5 << 20}, got); diff != "" {
			t.Errorf("total %d: sampled offsets -want +got:\n%s", total, diff)
		}
	}
}

func TestSampledBlock(t *testing.T) {
	var got []int64
	for i := range int64(70) {
		if sampledBlock(i) {
			got = append(got, i)
		}
	}
	if diff := cmp.Diff([]int64{0, 1, 2, 4, 8, 16, 32, 64}, got); diff != "" {
		t.Errorf("sampledBlock: -want +got:\n%s", diff)
	}
}

// TestVirtualSizeLimit: a qcow2 whose header gives a virtual size over the limit fails the
// stream at its first chunk, before a byte is passed on; at or under it, or with no limit, it
// streams.
func TestVirtualSizeLimit(t *testing.T) {
	cases := map[string]struct {
		reason     string
		virtual    uint64
		maxVirtual int64
		wantErr    error
		wantBytes  int64
	}{
		"Over":    {reason: "2^62 bytes against 2 TiB", virtual: 1 << 62, maxVirtual: 2 << 40, wantErr: &LimitError{Limit: LimitVirtualSize, MaxBytes: 2 << 40, Announced: 1 << 62}},
		"At":      {reason: "a limit is inclusive", virtual: 7 << 30, maxVirtual: 7 << 30, wantBytes: 1 << 20},
		"NoLimit": {reason: "0 does not limit", virtual: 1 << 62, wantBytes: 1 << 20},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			img := append(qcow2Head(3, 0, tc.virtual, 0), make([]byte, 1<<20-512)...)
			img = img[:1<<20]
			s := newImageStream(bytes.NewReader(img), FormatQCOW2, 0, 0, tc.maxVirtual, 0, nil, nil)
			n, err := io.Copy(io.Discard, struct{ io.Reader }{s})
			s.close()
			if diff := cmp.Diff(tc.wantErr, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nstream error: -want, +got:\n%s", tc.reason, diff)
			}
			if n != tc.wantBytes {
				t.Errorf("%s\n%d bytes passed on, want %d", tc.reason, n, tc.wantBytes)
			}
			if tc.wantErr != nil && !IsTerminal(err) {
				t.Errorf("%s\nan image over the virtual size limit is not terminal", tc.reason)
			}
		})
	}
}
