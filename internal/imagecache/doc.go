// Package imagecache publishes BaseImages: it streams a cloud image from an
// http(s) URL into a libvirt storage volume, verifies its sha256 in the same
// pass, and marks the volume usable only once it is complete and verified.
//
// # Names: one volume per host, pool and digest
//
// A data volume is named after the bytes it holds: DigestVolumeName is "pkvm-base-" + the
// image's full sha256 (64 hex digits) + ".qcow2" or ".img" for the format. Every BaseImage, in
// any namespace and with any URL, that asks for those bytes shares that one volume. Editing
// the digest gives a new name, so a new image never overwrites one that overlays back onto;
// the caller publishes the new one and detaches from the old one. Volumes of releases before
// shared images (24 hex digits of sha256(url "\n" sha256)) are still recognized, and removed
// by the one owner their marker names.
//
// An image given without sha256 is downloaded twice: once to compute its digest (nothing is
// stored), then published for that digest like a pinned one, the second download checked
// against the first (libvirt has no rename, and a host-side clone of a staged qcow2 may be
// rewritten by qemu-img; see decision 38). If the digest's volume is already published, the second download is
// skipped: the image is shared only by digest, and only after its bytes were hashed.
//
// # Atomic publish without rename
//
// libvirt has no volume rename, and an upload interrupted by a killed
// provider, a cut SSH connection or a libvirtd restart leaves a partial file.
// Each data volume NAME therefore comes with small raw companion volumes
// holding a JSON Record, each written exactly once into a freshly created
// volume (never overwritten in place, so a torn write can only yield invalid
// JSON, never a different valid record):
//
//   - NAME.owner-HASH, state "owner", one per BaseImage that uses the volume (HASH: 32 hex
//     digits of sha256 of its UID, OwnerName). It names the BaseImage (namespace, name, UID)
//     and what it asked for (URL without password, expected digest, format). Each BaseImage
//     creates and deletes only its own record, so any number of reconciles, in any number of
//     provider processes, add and remove owners without a read-modify-write race. It is
//     written first, before anything else of a publish.
//   - NAME.claim, state "claimed": created (libvirt's create is exclusive)
//     BEFORE the data volume and deleted after publishing. It names the
//     BaseImage uploading it and the provider process holding it (Record.Holder), which
//     rewrites it with the same bytes every claimRenew while the upload runs: its mtime is
//     the lease. Anyone else (another BaseImage, or another process reconciling the same
//     BaseImage) waits for a claim whose mtime moved within claimStale of its own clock, and
//     never deletes it (libvirt lets a volume be deleted during its upload); a stale claim
//     and what it guards are debris the next Publish cleans. The holder checks that the claim
//     is still its own before it writes the marker and before it deletes what a failed upload
//     left. Where the pool reports no timestamps, a claim is waited for while the BaseImage it
//     names has an owner record.
//   - NAME.meta, state "published": created only AFTER all bytes were
//     uploaded, the digest verified and the pool refreshed. It records the
//     publisher, source URL, digest, verified flag, format, file size and virtual
//     size, so a restarted provider with empty status knows what is on the
//     host without re-hashing anything. A BaseImage attaches to a published volume only
//     when the marker's digest and format are exactly the ones it asks for.
//
// Before the marker is written, sampled 1 MiB blocks of the stored volume (the first, those at
// power-of-two indexes, the last) are read back and compared with the digests taken while they
// were streamed: the marker certifies what the host stored.
//
// A data volume is Published only when NAME.meta holds a valid published
// Record for NAME and the file's size equals the recorded size. Anything else
// present (data without meta, a claim, an unreadable meta) is Debris: never
// reported usable. Lookup reads only the few hundred bytes of the
// records and one stat; it never re-hashes image data. A steady-state Observe costs three
// calls: the data volume's size and the fingerprints of the marker and of the BaseImage's own
// owner record.
//
// # Owners
//
// Publish adds the caller's owner record, then reuses the published volume, waits for a live
// owner's upload, or uploads. A digest is not possession: before it reuses (or waits for) bytes
// a BaseImage of another namespace downloaded, it downloads its own URL and hashes it to the
// digest (prove; nothing is stored), without its owner record meanwhile, so it is never seen
// attached before. Messages name the acting namespace's disks and count others'
// (WithNamespace, InUseError). A BaseImage never reads another's records on its behalf into its
// status (that shows the digest and sizes of the bytes, and its own URL), and errors never
// name other BaseImages. With a Liveness (WithLiveness: the controller asks the API server),
// Publish and Remove delete the owner records of UIDs gone from the cluster: a BaseImage
// deleted without its finalizer, or every BaseImage of a cluster restored from a backup, whose
// new UIDs attach again. A record still torn after a second is its dead writer's debris.
// Sweep does the same for every shared volume of a pool (the controller runs it when a
// BaseImage is deleted) and removes those left without owners once unused. A host's pools
// must therefore serve one management cluster: another cluster's UIDs look stale.
//
// # Removal
//
// Remove detaches the caller: while other (live) owners remain it deletes only the caller's
// record, unless disks of the caller's namespace use the volume (then it keeps it, IsInUse).
// The last owner leaves (Removal.Left: its record goes, the volume stays for Sweep) when only
// other namespaces' disks use the volume. The last owner's Remove refuses (IsInUse, keeping its record) while any volume in
// any pool backs onto the data volume or any domain's disk uses it, running or not, whoever
// defined it; and also while it cannot be sure (Usage.Doubts): an inactive pool (its volumes
// cannot be listed), a pool it cannot read, a disk that is a volume it cannot resolve, a qcow2
// disk outside every active pool whose backing chain libvirt does not show (a shut-off
// domain's). It then writes a "removing" claim, deletes the marker (unpublishing), checks
// users and owners again and restores the marker if either appeared meanwhile, then deletes
// the data, its own record and the claim.
//
// The check and the delete run under the base lock of the pool, which Shared.CreateOverlay
// (the one way the KVMDomain controller creates an overlay) takes too: within a process no
// overlay appears in between. Across processes the order closes the window: the removal deletes the marker
// before its last check, and a KVMDomain looks at the marker again after creating its overlay
// (and deletes the overlay if it is gone); a Publish adds its owner record before reading the
// marker. One of the two sides always sees the other.
//
// # Streaming (internal/imagefetch)
//
// Nothing is staged on the provider's disk. A reader goroutine fills 1 MiB
// buffers from the HTTP body and hashes them while the previous buffer is
// being sent over SSH, so download, hashing and upload overlap. The qcow2
// header is checked as it passes, versions 2 and 3 in full: the virtual size
// comes from bytes 24..31; an image declared qcow2 that is not, a raw image
// that is qcow2, a qcow2 with a backing file, encryption, or an incompatible
// feature a base cannot use (dirty, corrupt, external data file) or this
// provider does not know are rejected (FormatError) before the rest is
// downloaded.
//
// # Outside input (internal/imagefetch)
//
// Every download is bounded by the Downloads of the host's config (its
// imageSources): internal/sourcepolicy decides on the request URL, on every
// redirect (and a redirect from https to http is refused), and on every
// address a host name resolves to, right before connecting to it, so DNS
// cannot lead a download to an address the policy refuses. No HTTP proxy is
// used. The response headers must arrive within headerTimeoutSeconds, a
// stream that delivers nothing for stallTimeoutSeconds is cut, and an image
// larger than maxImageSizeMiB is refused: at once when its Content-Length
// says so, else when the bytes counted on the stream go over. A refusal
// (RefusedError) and a size over the limit (LimitError) are terminal; a
// timeout (LimitError) is worth retrying.
//
// # Code
//
// A Cache lives for one reconcile and reaches the host through Host, exactly the libvirt
// calls it makes (*libvirt.Client; fakestorage in the tables). What outlives it is on Shared,
// made once per process (setup.NewShared in controller.SetupGated) and by tests: what Lookup remembers, the claim
// clock, the holder name, the base locks and the protocol's periods. plan.go holds the
// decisions without I/O (planPublish, planRemove, planRecheck, verifyUpload); lookup.go,
// publish.go, upload.go, remove.go, users.go, sweep.go and overlay.go run them; owners.go,
// holder.go, recordio.go and observecache.go are the records, the claim lease and the memo.
package imagecache
