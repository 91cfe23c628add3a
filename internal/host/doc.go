// Package host connects to libvirt hosts.
//
// A Connections keeps one connection per distinct host configuration (host, port,
// user, private key, known_hosts, transport, socket and URI). Over SSH the
// libvirt RPC protocol (github.com/digitalocean/go-libvirt) is carried in an
// SSH direct-streamlocal channel to the host's libvirt unix socket; host keys
// are pinned to known_hosts data held in memory, user keys come from memory
// too. With the Unix transport the local libvirt socket is dialled directly.
//
// Connections are shared by every caller, kept alive with SSH keepalives,
// re-opened by the next call after a drop and closed after an idle time.
// Every libvirt call runs through Conn.Do, which bounds it by the caller's
// context.
//
// # A stuck call hurts only its caller
//
// A call that outlives its context is abandoned, not cut: Do returns the context's error and
// the call's goroutine waits for its reply in the background, while other callers go on on
// the same connection. Do then probes the connection with a cheap call; only a connection
// that does not answer it within the probe timeout (WithProbeTimeout) is torn down, keeping
// the SSH connection when sshd still answers a keepalive. More than 32 abandoned calls
// outstanding replace the connection, bounding the goroutines they hold.
//
// # A dead host fails fast
//
// Each host has a circuit breaker. Connection attempts run on a context of their own (the
// dial timeout, the pool's lifetime), so their outcome is recorded even when the caller that
// started one gave up. After a failed attempt the host is not dialled again for a backoff (2 s,
// doubling per further failure, at most 1 min: WithBreaker); calls fail at once meanwhile
// with a *HostDownError that names the host, how many attempts failed since when, the last
// error and when the next attempt starts. Once the backoff has passed one caller makes the
// next attempt; others fail at once until it ends. Only the first attempt to a host without
// failures is waited for by every caller. Attempts to different hosts never wait for each
// other.
package host
