package imagefetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
)

// Streaming parameters.
const (
	chunkSize   = 1 << 20 // bytes per libvirt stream packet
	chunkCount  = 3       // buffers in flight: one being filled, one queued, one being sent
	progressMiB = 8 << 20
	progressDur = time.Second
)

// ProgressFunc is told how many bytes were handed to libvirt so far and the
// image's size (0 when the server sent no Content-Length). It is called from
// the uploading goroutine, at most every second or 8 MiB and once at the
// end; it must not block.
type ProgressFunc func(done, total int64)

// imageStream reads an image from src in a goroutine that hashes and checks
// it, and hands full chunks to Read, so that downloading and hashing overlap
// with sending over SSH.
type imageStream struct {
	src     io.Reader
	format  Format
	max     int64 // bytes accepted from src; 0 for no limit
	stall   time.Duration
	onStall func()

	chunks chan []byte
	free   chan []byte
	stop   chan struct{}
	wg     sync.WaitGroup

	// Written by the producer; read after wg.Wait or after chunks closed.
	hash        hash.Hash
	samples     []BlockSample
	n           int64
	virtualSize int64
	err         error
	// maxVirtual bounds the virtual size a qcow2 header may give (0: no limit).
	maxVirtual int64

	errMu     sync.Mutex
	sourceErr error // err, readable at any time

	// Consumer side.
	cur      []byte
	curBuf   []byte // the buffer cur is part of
	done     int64
	total    int64
	progress ProgressFunc
	lastDone int64
	lastTime time.Time
}

// newImageStream streams src, declared as format. total is the announced size (0 when
// unknown); more than max bytes (0: no limit) fail the stream with a *LimitError of
// LimitSize, and a qcow2 header that gives a virtual size over maxVirtual (0: no limit) with
// one of LimitVirtualSize, before any byte of it is passed on. When src delivers no byte for
// stall (0: no limit), onStall is called once: it is expected to make src fail, e.g. by
// cancelling the request.
func newImageStream(src io.Reader, format Format, total, maxBytes, maxVirtual int64, stall time.Duration, onStall func(), progress ProgressFunc) *imageStream {
	s := &imageStream{
		src: src, format: format, max: maxBytes, maxVirtual: maxVirtual, stall: stall, onStall: onStall,
		chunks: make(chan []byte, chunkCount-1), free: make(chan []byte, chunkCount), stop: make(chan struct{}),
		hash: sha256.New(), total: total, progress: progress, lastTime: time.Now(),
	}
	for range chunkCount {
		s.free <- make([]byte, chunkSize)
	}
	s.wg.Add(1)
	go s.produce()
	return s
}

// stallTimer calls a func once when the source delivers nothing for a while. It runs only
// while the producer waits for the source: time spent waiting for the consumer (libvirt's
// upload) is not the server's stall.
type stallTimer struct {
	t     *time.Timer // nil: no stall limit
	d     time.Duration
	fired bool
}

func newStallTimer(d time.Duration, f func()) *stallTimer {
	st := &stallTimer{d: d}
	if d > 0 && f != nil {
		st.t = time.AfterFunc(d, f)
	}
	return st
}

// pause stops the clock; it notes when the timer has fired already.
func (st *stallTimer) pause() {
	if st.t != nil && !st.fired && !st.t.Stop() {
		st.fired = true
	}
}

// resume restarts the clock from zero, unless the timer has fired.
func (st *stallTimer) resume() {
	if st.t != nil && !st.fired {
		st.t.Reset(st.d)
	}
}

// fill reads into buf until it is full, src ends or fails. err is io.EOF at
// the end of src.
func (s *imageStream) fill(buf []byte, st *stallTimer) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := s.src.Read(buf[n:])
		n += m
		if m > 0 {
			st.pause()
			st.resume()
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// checkHead checks the first chunk: the format it declares, and the virtual size a qcow2
// header gives against maxVirtual.
func (s *imageStream) checkHead(b []byte) error {
	vs, err := checkFormat(s.format, b)
	if err != nil {
		return &FormatError{Reason: err.Error()}
	}
	s.virtualSize = vs
	if s.maxVirtual > 0 && vs > s.maxVirtual {
		return &LimitError{Limit: LimitVirtualSize, MaxBytes: s.maxVirtual, Announced: vs}
	}
	return nil
}

func (s *imageStream) produce() {
	defer s.wg.Done()
	defer close(s.chunks)
	st := newStallTimer(s.stall, s.onStall)
	defer st.pause()
	for {
		var buf []byte
		st.pause()
		select {
		case buf = <-s.free:
		case <-s.stop:
			return
		}
		st.resume()
		n, err := s.fill(buf[:cap(buf)], st)
		if s.n == 0 && (n > 0 || errors.Is(err, io.EOF)) {
			if herr := s.checkHead(buf[:n]); herr != nil {
				s.fail(herr)
				return
			}
		}
		if s.max > 0 && s.n+int64(n) > s.max {
			s.fail(&LimitError{Limit: LimitSize, MaxBytes: s.max})
			return
		}
		if n > 0 {
			_, _ = s.hash.Write(buf[:n])
			s.sample(buf[:n])
			s.n += int64(n)
			st.pause()
			select {
			case s.chunks <- buf[:n]:
			case <-s.stop:
				return
			}
			st.resume()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

// sample keeps the digest of block b (read at offset s.n) when it is one to read back.
func (s *imageStream) sample(b []byte) {
	n := len(b)
	if sampledBlock(s.n/chunkSize) || n < chunkSize || (s.total > 0 && s.n+int64(n) == s.total) {
		s.samples = append(s.samples, BlockSample{Offset: s.n, Len: n, Sum: sha256.Sum256(b)})
	}
}

func (s *imageStream) fail(err error) {
	s.err = err
	s.errMu.Lock()
	s.sourceErr = err
	s.errMu.Unlock()
}

// failed returns the error that ended reading the source so far, if any.
func (s *imageStream) failed() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.sourceErr
}

// Read hands the next chunk to libvirt's stream.
func (s *imageStream) Read(p []byte) (int, error) {
	if len(s.cur) == 0 {
		buf, ok := <-s.chunks
		if !ok {
			if s.err != nil {
				return 0, s.err
			}
			s.report(true)
			return 0, io.EOF
		}
		s.cur, s.curBuf = buf, buf[:cap(buf)]
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	if len(s.cur) == 0 {
		s.free <- s.curBuf // capacity chunkCount: never blocks
		s.curBuf = nil
		faultpoint.Reach(faultpoint.BaseMidUpload)
	}
	s.done += int64(n)
	s.report(false)
	return n, nil
}

func (s *imageStream) report(final bool) {
	if s.progress == nil {
		return
	}
	now := time.Now()
	if final || s.done-s.lastDone >= progressMiB || now.Sub(s.lastTime) >= progressDur {
		s.lastDone, s.lastTime = s.done, now
		s.progress(s.done, s.total)
	}
}

// close stops the producer and waits for it; the caller closes src first
// if the producer may be blocked reading it.
func (s *imageStream) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// sum returns the hex sha256 of the bytes read so far; call after close.
func (s *imageStream) sum() string { return hex.EncodeToString(s.hash.Sum(nil)) }

// BlockSample is the digest of one block of the stream, read back from the stored volume
// before it is published: a cheap check of what the host stored (a second writer, a torn
// write, a storage fault), where hashing the whole volume again would mean downloading it.
type BlockSample struct {
	Offset int64
	Len    int
	Sum    [sha256.Size]byte
}

// sampledBlock tells which 1 MiB blocks are sampled: the first, then those whose index is a
// power of two (the qcow2 header and tables sit at the start; 11 blocks of a 1 GiB image);
// the last block is sampled too.
func sampledBlock(idx int64) bool { return idx&(idx-1) == 0 }

// errStalled is the cause of a download that sent no bytes for too long;
// Publish reports it as a *LimitError of LimitStall.
var errStalled = errors.New("the image server sent no data for too long")

// withStall returns a context cancelled with errStalled by the returned func.
func withStall(ctx context.Context) (context.Context, func(), context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	return ctx, func() { cancel(errStalled) }, func() { cancel(nil) }
}
