//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// imageDirs are the paths the guest image is served under: team-a's shared BaseImage, the
// claim's own, proxy-b's own and the demo's (a BaseImage volume is keyed by URL and digest, so two
// BaseImages on one host need two URLs).
var imageDirs = []string{"a", "b", "c", "demo"}

// imageHandler serves the guest image file under /<dir>/<file name> (with Range and HEAD,
// as http.ServeContent does) and logs every request under the server's name.
func imageHandler(name, image string) http.Handler {
	base := filepath.Base(image)
	paths := map[string]bool{}
	for _, d := range imageDirs {
		paths["/"+d+"/"+base] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rw := &recorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			logf("%s: %s %s %s -> %d, %d bytes (%ss)", name, r.RemoteAddr, r.Method, r.URL.Path, rw.status, rw.n, secs(time.Since(t0)))
		}()
		if !paths[r.URL.Path] {
			http.NotFound(rw, r)
			return
		}
		f, err := os.Open(image)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(rw, r, base, st.ModTime(), f)
	})
}

// recorder remembers the status and the size of a response, for the log.
type recorder struct {
	http.ResponseWriter
	status int
	n      int64
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

func (r *recorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.n += int64(n)
	return n, err
}

// originHandler answers 204 to everything: the URL every proxy is probed and tested with.
func originHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// listen serves h on addr until ctx ends, over TLS when tlsCfg is not nil.
func listen(ctx context.Context, addr string, h http.Handler, tlsCfg *tls.Config) (func() error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
	}()
	return func() error {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
}

// serve is e2ectl serve: the image server on ImageHost:IMAGE_PORT, the same over HTTPS on
// IMAGE_TLS_PORT (the certificate of the CA the provider trusts) and IMAGE_UNTRUSTED_PORT (one
// of a CA it does not), and the 204 origin on node's LAN address, port ORIGIN_PORT (the guests
// reach it there), until SIGTERM. lib.sh starts it as a process, for make e2e and make
// bench-latency, and for make demo (whose Proxy keeps probing the origin). The HTTPS servers
// run when the bring-up made their certificates (e2ectl pki).
func serve(cfg config) int {
	if _, err := os.Stat(cfg.Image); err != nil {
		warnf("the guest image: %v", err)
		return 1
	}
	bridge, _, err := origin(cfg)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	imageAddr := net.JoinHostPort(cfg.ImageHost, fmt.Sprint(cfg.ImagePort))
	originAddr := net.JoinHostPort(bridge, fmt.Sprint(cfg.OriginPort))
	waitImage, err := listen(ctx, imageAddr, imageHandler("image server", cfg.Image), nil)
	if err != nil {
		warnf("image server: %v", err)
		return 1
	}
	waitOrigin, err := listen(ctx, originAddr, originHandler(), nil)
	if err != nil {
		warnf("204 origin: %v", err)
		return 1
	}
	waits := []func() error{waitImage, waitOrigin}
	logf("image server on http://%s/{a,b,c,demo}/%s; 204 origin on http://%s/", imageAddr, filepath.Base(cfg.Image), originAddr)
	if _, err := os.Stat(cfg.tlsDir()); err == nil {
		for _, s := range []struct {
			name string
			port int
		}{{tlsTrusted, cfg.ImageTLSPort}, {tlsUntrusted, cfg.ImageUntrustedPort}} {
			tlsCfg, err := serverTLS(cfg.tlsDir(), s.name)
			if err != nil {
				warnf("%v", err)
				return 1
			}
			addr := net.JoinHostPort(cfg.ImageHost, fmt.Sprint(s.port))
			w, err := listen(ctx, addr, imageHandler("image server (https, "+s.name+" CA)", cfg.Image), tlsCfg)
			if err != nil {
				warnf("image server (https, %s CA): %v", s.name, err)
				return 1
			}
			waits = append(waits, w)
			logf("image server on https://%s/{a,b,c,demo}/%s (certificate of the %s CA, %s)", addr, filepath.Base(cfg.Image), s.name, filepath.Join(cfg.tlsDir(), s.name, caCertFile))
		}
	}
	rc := 0
	for _, w := range waits {
		if err := w(); err != nil {
			warnf("%v", err)
			rc = 1
		}
	}
	logf("servers stopped")
	return rc
}

func httpGet(ctx context.Context, proxy *url.URL, u string, timeout time.Duration) (int, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// waitServers waits until the image server serves the image and the origin answers 204.
func (e *env) waitServers(ctx context.Context) error {
	img := fmt.Sprintf("http://%s/a/%s", net.JoinHostPort(e.cfg.ImageHost, fmt.Sprint(e.cfg.ImagePort)), filepath.Base(e.cfg.Image))
	return waitFor(ctx, "the image server and the 204 origin (process http-servers)", 500*time.Millisecond, 60*time.Second, func(ctx context.Context) error {
		if c, err := httpHead(ctx, img); c != http.StatusOK {
			return fmt.Errorf("HEAD %s: %d %v", img, c, err)
		}
		if c, err := httpGet(ctx, nil, e.probeURL, 5*time.Second); c != http.StatusNoContent {
			return fmt.Errorf("GET %s: %d %v", e.probeURL, c, err)
		}
		return nil
	})
}

func httpHead(ctx context.Context, u string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return 0, err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
