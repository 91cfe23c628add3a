// Command pause is the node's pod sandbox image (cluster/node): with no arguments it does
// nothing until SIGTERM or SIGINT, as a pod's infrastructure container must. The same image
// serves the node's proof (cluster/node/check.sh) with `pause probe`: it prints its user and
// group IDs, then calls the API server through the kubernetes Service with the pod's mounted
// ServiceAccount token and CA (what an in-cluster client does), prints the answer and pauses.
// With DIAL=host:port[,host:port...] it then opens a TCP connection to each and prints the
// first line the server sends (an SSH server's banner): the path a provider pod takes to its
// libvirt hosts. It exits 1 when anything fails, so the pod shows the failure.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// saDir is where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		if err := probe(); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

func probe() error {
	fmt.Printf("uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), groups())
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	ns, err := os.ReadFile(saDir + "/namespace")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := "https://" + net.JoinHostPort(host, port) + "/api/v1/namespaces/" + string(ns) + "/serviceaccounts"
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil) //nolint:gosec // G704: the kubelet sets the API server address
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	t0 := time.Now()
	resp, err := c.Do(req) //nolint:gosec // G704: as above
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("GET %s: %s in %s\n%s\n", url, resp.Status, time.Since(t0).Round(time.Millisecond), body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	for _, addr := range strings.Split(os.Getenv("DIAL"), ",") {
		if addr == "" {
			continue
		}
		if err := dial(addr); err != nil {
			return err
		}
	}
	fmt.Println("PROBE OK")
	return nil
}

// dial prints the first line the server at addr sends.
func dial(addr string) error {
	t0 := time.Now()
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck // read-only
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	fmt.Printf("DIAL %s from %s: %q in %s\n", addr, c.LocalAddr(), strings.TrimSpace(line), time.Since(t0).Round(time.Millisecond))
	return nil
}

func groups() []int {
	g, err := os.Getgroups()
	if err != nil {
		return nil
	}
	return g
}
