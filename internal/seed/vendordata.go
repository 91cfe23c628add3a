package seed

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// GuestAgentScript is the vendor-data shell script written when
// Input.InstallGuestAgent is set. It installs qemu-guest-agent with whichever
// of apt-get, dnf, yum, zypper or apk exists, unless the agent is already
// installed, then starts it with systemctl, service or rc-service. It always
// exits 0 so that it never fails the boot.
//
// Being a shell script, cloud-init hands it to the vendor script handler
// (scripts_vendor), so no user-data can override it the way it overrides the
// packages or runcmd of a cloud-config vendor-data.
const GuestAgentScript = `#!/bin/sh
# provider-kvm: make sure qemu-guest-agent is installed and running.
# This script never fails the boot.

log() { echo "provider-kvm guest agent bootstrap: $*"; }
have() { command -v "$1" >/dev/null 2>&1; }

installed() {
	have qemu-ga || [ -x /usr/bin/qemu-ga ] || [ -x /usr/sbin/qemu-ga ] ||
		[ -x /usr/local/bin/qemu-ga ]
}

if installed; then
	log "qemu-guest-agent already installed"
elif have apt-get; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 update ||
		log "apt-get update failed"
	apt-get -o DPkg::Lock::Timeout=300 install -y qemu-guest-agent ||
		log "apt-get install failed"
elif have dnf; then
	dnf install -y qemu-guest-agent || log "dnf install failed"
elif have yum; then
	yum install -y qemu-guest-agent || log "yum install failed"
elif have zypper; then
	zypper --non-interactive install qemu-guest-agent ||
		log "zypper install failed"
elif have apk; then
	apk add --no-cache qemu-guest-agent || log "apk add failed"
else
	log "no supported package manager found"
fi

if have systemctl && [ -d /run/systemd/system ]; then
	# Start it unless udev already did (Debian's unit is static, started when its virtio
	# port appears); enable only a unit that is disabled, without a daemon reload: a reload
	# costs seconds under emulation and delays everything after this script.
	systemctl is-active --quiet qemu-guest-agent ||
		systemctl start qemu-guest-agent || log "systemctl start failed"
	if [ "$(systemctl is-enabled qemu-guest-agent 2>/dev/null)" = disabled ]; then
		systemctl enable --no-reload qemu-guest-agent >/dev/null 2>&1
	fi
elif have rc-service; then
	rc-update add qemu-guest-agent default >/dev/null 2>&1
	rc-service qemu-guest-agent start || log "rc-service start failed"
elif have service; then
	service qemu-guest-agent start || log "service start failed"
else
	log "no supported service manager found"
fi

exit 0
`

// mimeBoundary separates the parts of a multipart vendor-data. The user's
// part is base64 encoded and GuestAgentScript is fixed, so the boundary can
// be a constant: a boundary line starts with "--", which base64 never
// produces.
const mimeBoundary = "==provider-kvm-seed-vendor-data=="

// Names and types of the parts of a multipart vendor-data.
const (
	agentPartFilename = "provider-kvm-qemu-guest-agent.sh"
	agentPartType     = "text/x-shellscript"
	userPartFilename  = "vendor-data"
	userPartType      = "text/plain"
)

// errBoundaryInScript guards against an edit of GuestAgentScript that would
// break the multipart message.
var errBoundaryInScript = errors.New("guest agent script contains the MIME boundary")

// VendorData returns the vendor-data file for in, or nil when there is none:
//
//   - neither InstallGuestAgent nor VendorData: nil;
//   - only VendorData: VendorData verbatim;
//   - only InstallGuestAgent: GuestAgentScript;
//   - both: a MIME multipart/mixed message with GuestAgentScript as a
//     text/x-shellscript part followed by VendorData, base64 encoded so its
//     bytes survive exactly, as a text/plain part. cloud-init decides the
//     type of a text/plain part from its first line, as it would for a
//     whole vendor-data file; this package never classifies user content.
//
// The output is deterministic.
func VendorData(in Input) ([]byte, error) {
	switch {
	case !in.InstallGuestAgent && in.VendorData == nil:
		return nil, nil
	case !in.InstallGuestAgent:
		return bytes.Clone(in.VendorData), nil
	case in.VendorData == nil:
		return []byte(GuestAgentScript), nil
	}
	return multipartVendorData(in.VendorData)
}

// multipartVendorData wraps GuestAgentScript and the user's vendor-data in a
// multipart/mixed message that cloud-init's user data processor accepts.
func multipartVendorData(user []byte) ([]byte, error) {
	if bytes.Contains([]byte(GuestAgentScript), []byte(mimeBoundary)) {
		return nil, errBoundaryInScript
	}

	var b bytes.Buffer
	// cloud-init treats vendor-data as MIME when "mime-version:" appears
	// in its first 4096 bytes.
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\r\nMIME-Version: 1.0\r\n\r\n", mimeBoundary)

	mw := multipart.NewWriter(&b)
	if err := mw.SetBoundary(mimeBoundary); err != nil {
		return nil, errors.Wrap(err, "setting MIME boundary")
	}

	agent, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Type":              {agentPartType + `; charset="us-ascii"`},
		"Content-Disposition":       {`attachment; filename="` + agentPartFilename + `"`},
		"Content-Transfer-Encoding": {"7bit"},
		"Mime-Version":              {"1.0"},
	})
	if err != nil {
		return nil, errors.Wrap(err, "creating guest agent MIME part")
	}
	if _, err := agent.Write([]byte(GuestAgentScript)); err != nil {
		return nil, errors.Wrap(err, "writing guest agent MIME part")
	}

	part, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Type":              {userPartType},
		"Content-Disposition":       {`attachment; filename="` + userPartFilename + `"`},
		"Content-Transfer-Encoding": {"base64"},
		"Mime-Version":              {"1.0"},
	})
	if err != nil {
		return nil, errors.Wrap(err, "creating vendor-data MIME part")
	}
	if err := writeBase64Lines(part, user); err != nil {
		return nil, errors.Wrap(err, "writing vendor-data MIME part")
	}

	if err := mw.Close(); err != nil {
		return nil, errors.Wrap(err, "closing MIME message")
	}
	return b.Bytes(), nil
}

// writeBase64Lines writes data base64 encoded in lines of 76 characters, as
// RFC 2045 asks.
func writeBase64Lines(w io.Writer, data []byte) error {
	const lineLen = 76
	enc := base64.StdEncoding.EncodeToString(data)
	var b bytes.Buffer
	b.Grow(len(enc) + 2*(len(enc)/lineLen+1))
	for len(enc) > lineLen {
		b.WriteString(enc[:lineLen])
		b.WriteString("\r\n")
		enc = enc[lineLen:]
	}
	if enc != "" {
		b.WriteString(enc)
		b.WriteString("\r\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}
