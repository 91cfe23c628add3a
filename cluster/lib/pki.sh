# shellcheck shell=bash
# pki.sh -- the one PKI of the test beds (openssl; RSA 2048, 30 days), sourced (never run) by
# cluster/e2e/lib.sh (make demo's control plane and functions) and cluster/node/up.sh (the
# node's cluster). Each function leaves what already exists alone, so a running cluster keeps
# its certificates.
#   pki_ca DIR CN              a CA: DIR/ca.key, DIR/ca.crt (subject /CN=CN)
#   pki_cert DIR NAME SUBJ [SAN]
#                              DIR/NAME.key and DIR/NAME.crt signed by DIR's CA; SAN e.g.
#                              "IP:127.0.0.1,DNS:localhost"
#   pki_sa DIR                 the service-account key pair DIR/sa.key, DIR/sa.pub

pki_ca() {
	mkdir -p "$1"
	[[ -s $1/ca.crt ]] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/ca.key" -out "$1/ca.crt" -days 30 \
		-subj "/CN=$2" 2>/dev/null
}

pki_cert() {
	local d=$1 n=$2 subj=$3 san=${4:-}
	[[ -s $d/$n.crt ]] && return 0
	openssl req -newkey rsa:2048 -nodes -keyout "$d/$n.key" -subj "$subj" -out "$d/$n.csr" 2>/dev/null
	: >"$d/$n.ext"
	[[ -z $san ]] || echo "subjectAltName=$san" >"$d/$n.ext"
	openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 30 -out "$d/$n.crt" -extfile "$d/$n.ext" 2>/dev/null
}

pki_sa() {
	[[ -s $1/sa.key ]] && return 0
	openssl genrsa -out "$1/sa.key" 2048 2>/dev/null
	openssl rsa -in "$1/sa.key" -pubout -out "$1/sa.pub" 2>/dev/null
}
