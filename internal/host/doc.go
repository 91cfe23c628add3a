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
package host
