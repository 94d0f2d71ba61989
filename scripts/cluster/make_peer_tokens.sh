#!/usr/bin/env bash
# Makes a token per pserver, and the identities file every pserver reads
# (docs/security.md, "Each pserver its own token"):
#
#   scripts/cluster/make_peer_tokens.sh OUT_DIR ADDRESS...
#   scripts/cluster/make_peer_tokens.sh --add OUT_DIR ADDRESS...  (more)
#
# ADDRESS: host:port as the trainers' --pservers names the pserver.
# Writes into OUT_DIR (created, mode 700):
#   <ADDRESS>.token   that pserver's secret (mode 600): its --peer_token_file,
#                     and on no other host
#   peer_identities   "<ADDRESS> <SHA-256 of its token>" lines, no secret:
#                     every pserver's --peer_identities_file
# The pservers read peer_identities again every 2 s: copy the new file to
# every host after --add, and start the new pservers.
set -euo pipefail

usage() {
  echo "usage: $0 [--add] OUT_DIR ADDRESS...   (ADDRESS: host:port)" >&2
  exit 2
}
add=0
if [[ "${1:-}" == --add ]]; then
  add=1
  shift
fi
[[ $# -ge 2 && "$1" != -* ]] || usage
out="$1"
shift
command -v openssl >/dev/null || {
  echo "$0: openssl not found (apt-get install openssl)" >&2
  exit 1
}

ids="$out/peer_identities"
if [[ $add == 0 && -e "$ids" ]]; then
  echo "$0: $ids exists: give --add to add pservers to it, or another folder" >&2
  exit 1
fi
if [[ $add == 1 && ! -e "$ids" ]]; then
  echo "$0: --add: $ids does not exist (make it without --add first)" >&2
  exit 1
fi
for addr in "$@"; do
  if [[ ! "$addr" =~ ^[^[:space:]/]+:[0-9]+$ ]]; then
    echo "$0: '$addr' is not host:port (as in the trainers' --pservers)" >&2
    exit 1
  fi
done
mkdir -p "$out"
chmod 700 "$out"
umask 077
tmp="$(mktemp "$out/.peer_identities.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
[[ $add == 1 ]] && cat "$ids" >"$tmp"
for addr in "$@"; do
  if cut -d' ' -f1 "$tmp" | grep -qxF -- "$addr"; then
    echo "$0: $addr is listed already" >&2
    exit 1
  fi
  token="$(openssl rand -hex 32)"
  printf '%s\n' "$token" >"$out/$addr.token"
  printf '%s %s\n' "$addr" \
    "$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)" >>"$tmp"
done
chmod 644 "$tmp"
mv "$tmp" "$ids"
trap - EXIT
echo "wrote $# token(s) and $ids: give each pserver its own" \
  "<address>.token as --peer_token_file, and $ids as --peer_identities_file"
