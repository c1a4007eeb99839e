#!/usr/bin/env bash
# Makes the TLS material the security tests use, with the openssl command-line
# tool, into a directory the caller owns (a temporary one). Nothing it makes is
# ever committed; tests run it at test time.
#
#   scripts/gen-test-certs.sh DIR [CLIENT_PRINCIPAL]
#
# DIR/ca.pem, ca.key               the test CA (the roots clients and tpoold trust)
# DIR/server.pem, server.key       tpoold: SAN IP:127.0.0.1, DNS:localhost; CN localhost
# DIR/client.pem, client.key       a client: CN and SAN DNS = CLIENT_PRINCIPAL (default
#                                  test-client), extendedKeyUsage clientAuth
# DIR/expired.pem, expired.key     like server.pem, signed by the CA, but valid only in 2020
# DIR/untrusted-ca.pem, .key       a second CA nobody trusts
# DIR/untrusted.pem, untrusted.key like server.pem (same SANs), signed by the untrusted CA
#
# EC P-256 keys (fast to make, TLS 1.2 and 1.3), SHA-256 signatures, 2 days of
# validity (a test run needs minutes). The same commands, with your own CA and
# a longer -days, issue real certificates (docs/security.md, "Certificates").
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 DIR [CLIENT_PRINCIPAL]" >&2
  exit 2
fi
dir=$1
principal=${2:-test-client}
if [[ ! $principal =~ ^[A-Za-z0-9_.@-]{1,64}$ ]]; then
  echo "$0: principal '$principal' must be 1 to 64 characters from A-Z a-z 0-9 _ . @ -" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "$0: the openssl command is not installed (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# ca NAME: a self-signed CA certificate NAME.pem with key NAME.key.
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem" 2>/dev/null
}

# leaf NAME CA CN EXT [STARTDATE ENDDATE]: NAME.pem signed by CA.pem. openssl ca
# (rather than x509 -req) because only it takes explicit validity dates.
leaf() {
  local name=$1 signer=$2 cn=$3 ext=$4 start=${5:-} end=${6:-}
  key "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  local db=".ca-$name"
  mkdir -p "$db"
  : >"$db/index.txt"
  # A random serial: two certificates of one CA never share one.
  openssl rand -hex 16 | sed "s/^./7/" >"$db/serial"
  cat >"$db/ca.cnf" <<CNF
[ca]
default_ca = test_ca
[test_ca]
database = $db/index.txt
serial = $db/serial
new_certs_dir = $db
certificate = $signer.pem
private_key = $signer.key
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[anything]
commonName = supplied
[ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
$ext
CNF
  local dates=(-days 2)
  [[ -n $start ]] && dates=(-startdate "$start" -enddate "$end")
  openssl ca -batch -config "$db/ca.cnf" -extensions ext -notext "${dates[@]}" \
    -in "$name.csr" -out "$name.pem" 2>"$db/log" || { cat "$db/log" >&2; exit 1; }
  rm -rf "$db" "$name.csr"
}

server_ext=$'extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1,DNS:localhost'
ca ca "tpoold test CA"
leaf server ca localhost "$server_ext"
leaf client ca "$principal" $'extendedKeyUsage = clientAuth\nsubjectAltName = DNS:'"$principal"
leaf expired ca localhost "$server_ext" 20200101000000Z 20200102000000Z
ca untrusted-ca "untrusted test CA"
leaf untrusted untrusted-ca localhost "$server_ext"
chmod 0644 ./*.pem
echo "$0: wrote ca, server, client ($principal), expired, untrusted-ca, untrusted (.pem/.key) to $PWD"
