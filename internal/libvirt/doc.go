// Package libvirt is a thin, typed wrapper over github.com/digitalocean/go-libvirt
// for the storage operations the provider uses: pools, volumes, volume upload and
// download, and the disks of domains.
//
// Every call runs through a Conn's Do (see internal/host), so it is bounded by the
// caller's context. Errors say what was being done ("cannot upload volume X to pool
// Y on root@host:22") and keep libvirt's error code: IsNotFound, IsExists and
// IsPoolBusy classify them.
//
// # Serializing per pool
//
// libvirt's storage driver refuses a pool refresh (and pool destroy, delete,
// undefine) with "pool 'P' has asynchronous jobs running" while a volume of the
// pool is being built, i.e. during StorageVolCreateXML, whose build step runs with
// the pool unlocked; the build of a qcow2 volume runs qemu-img and can take
// seconds. libvirt's own refresh after an upload silently skips the refresh when
// that happens, so a caller that needs fresh volume metadata must refresh itself.
//
// The Client therefore does two things:
//
//   - Within one process it serializes the short pool-mutating calls (volume
//     create, volume delete, pool refresh) per (host, pool) with a
//     context-aware lock shared by every Client of the process (on its Shared). Uploads and
//     downloads do not take the lock: they can last minutes, must not block
//     other resources' volume creation in the same pool, and libvirt does not
//     count them as asynchronous jobs (measured on libvirt 9.0: a refresh,
//     a create and a delete in the pool all succeed during an upload, while
//     four concurrent create+refresh+delete loops without the lock got 19
//     busy refusals out of 60 calls, all of them refreshes).
//   - Calls that libvirt still refuses as busy (another process, another
//     provider replica, an operator's virsh, libvirt's own post-upload refresh)
//     are retried with exponential backoff (100 ms doubling to 2 s) until the
//     context ends. A lock alone cannot see other processes; retries alone
//     would make the provider's own calls collide and back off needlessly.
//
// # Downloads
//
// libvirt 9.0 sometimes sends a download's data before the reply to the
// StorageVolDownload call (about one download in 30 on the test bed).
// go-libvirt then drops data and can deadlock its receive loop, hanging every
// caller of the shared connection. Download therefore opens a libvirt
// connection of its own (through the Conn's DialContext, to the socket set
// with WithSocket) and puts stream packets back behind their call's reply.
//
// # Uploads and cancellation
//
// go-libvirt's calls take no context. Conn.Do abandons a call that outlives its context
// rather than closing the host's shared connection (see internal/host), and no RPC of a
// Client's call is sent once that call's context has ended. Uploads, like downloads, run on a
// libvirt connection of their own (when the Conn is a Dialer), so nothing done to the shared
// connection cuts them, and ending one touches no other call: when ctx ends, the upload's
// reader returns ctx's error, go-libvirt sends a stream abort and libvirt answers "stream
// aborted"; only if that does not finish within StreamAbortGrace is the upload's own
// connection closed.
package libvirt
