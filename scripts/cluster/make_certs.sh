#!/usr/bin/env bash
# Makes a CA and, signed by it, a pserver certificate and a client
# certificate, with openssl (docs/security.md). For test clusters, and as a
# starting point: a production CA belongs to whoever runs the cluster.
#
#   scripts/cluster/make_certs.sh OUT_DIR [NAMES]
#
# NAMES: comma-separated host names and IP addresses that trainers dial the
# pservers by (they go into the pserver certificate's subjectAltName);
# default 127.0.0.1,localhost. Writes into OUT_DIR (created, mode 700):
#   ca.pem ca.key          the CA (keep ca.key off the cluster)
#   server.pem server.key  pserver: --tls_cert_file, --tls_key_file
#   client.pem client.key  trainers and tools: --tls_cert_file, --tls_key_file
# and every process takes ca.pem as --tls_ca_file. Keys are ECDSA P-256,
# unencrypted, mode 600. Existing files in OUT_DIR are replaced.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
  echo "usage: $0 OUT_DIR [NAMES]   (NAMES default: 127.0.0.1,localhost)" >&2
  exit 2
fi
out="$1"
names="${2:-127.0.0.1,localhost}"
command -v openssl >/dev/null || {
  echo "$0: openssl not found (apt-get install openssl)" >&2
  exit 1
}

san=""
IFS=',' read -ra parts <<<"$names"
for n in "${parts[@]}"; do
  [[ -z "$n" ]] && continue
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then
    san+="${san:+,}IP:$n"
  else
    san+="${san:+,}DNS:$n"
  fi
done
[[ -n "$san" ]] || { echo "$0: no names given" >&2; exit 2; }

mkdir -p "$out"
chmod 700 "$out"
cd "$out"
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 3650 \
  -subj "/CN=ShardPS CA $(date +%Y%m%d%H%M%S)-$RANDOM" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

sign() {  # name CN extensions
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -days 825 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server shardps-pserver \
  "subjectAltName=$san
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature"
sign client shardps-client \
  "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
rm -f ca.srl
chmod 644 ca.pem server.pem client.pem
echo "certificates in $out (pserver names: $san)"
