// Package imagecache publishes BaseImages: it streams a cloud image from an
// http(s) URL into a libvirt storage volume, verifies its sha256 in the same
// pass, and marks the volume usable only once it is complete and verified.
//
// # Names
//
// A BaseImage's data volume is named after its source: VolumeName is
// "pkvm-base-" + the first 24 hex digits of sha256(url "\n" expected sha256),
// plus ".qcow2" or ".img" for the format. Editing the URL or the digest gives
// a new name, so a new image never overwrites one that overlays back onto;
// the caller publishes the new one and removes the old one once unused.
//
// # Atomic publish without rename
//
// libvirt has no volume rename, and an upload interrupted by a killed
// provider, a cut SSH connection or a libvirtd restart leaves a partial file.
// Each data volume NAME therefore comes with two small raw companion volumes
// holding a JSON Record, each written exactly once into a freshly created
// volume (never overwritten in place, so a torn write can only yield invalid
// JSON, never a different valid record):
//
//   - NAME.claim, state "claimed": created (libvirt's create is exclusive)
//     BEFORE the data volume and deleted after publishing. It names the
//     owner (BaseImage UID) of an upload in progress or of its debris, so
//     another BaseImage with the same source gets IsOwnedByOther instead of
//     deleting a file being uploaded (libvirt lets a volume be deleted during
//     its upload).
//   - NAME.meta, state "published": created only AFTER all bytes were
//     uploaded, the digest verified and the pool refreshed. It records the
//     owner, source URL, digest, verified flag, format, file size and virtual
//     size, so a restarted provider with empty status knows what is on the
//     host without re-hashing anything.
//
// A data volume is Published only when NAME.meta holds a valid published
// Record for NAME and the file's size equals the recorded size. Anything else
// present (data without meta, a claim, an unreadable meta) is Debris: never
// reported usable, and removed by the owner's next Publish (or by anyone when
// no record names an owner). Lookup reads only the few hundred bytes of the
// records and one stat; it never re-hashes image data.
//
// # Owners
//
// Every record names its owner. Publish, Lookup and Remove refuse volumes
// whose records name another owner UID (IsOwnedByOther), so two BaseImages
// never share or clobber a file.
//
// # Removal
//
// Remove refuses while any volume in any active pool backs onto the data
// volume, or any domain's disk uses it (IsInUse). It deletes the marker
// first (unpublishing), checks for users again and restores the marker if one
// appeared meanwhile, then deletes the data and the claim. A claim (state
// "removing") is written before, so a removal cut half-way leaves debris
// still attributed to its owner.
//
// # Streaming
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
// # Outside input
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
package imagecache
