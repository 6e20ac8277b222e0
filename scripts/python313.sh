#!/usr/bin/env bash
# Python 3.13 for the integrations whose framework needs a newer Python than the system's
# (CI's is Debian bookworm's 3.11; openhands-sdk needs 3.12 or later), built once into DIR.
#
#   scripts/python313.sh DIR        # -> DIR/bin/python3.13 (kept: a second call checks it)
#
# CPython 3.13.5 from Debian trixie's source package (deb.debian.org, which CI reaches;
# python.org and GitHub it does not), checked against its SHA-256 from trixie's Sources
# index. Built without PGO or LTO (about 4 minutes on 2 cores). It needs gcc, make, xz and
# the headers of OpenSSL, zlib and libffi (pip needs ssl and zlib, pydantic's deps ctypes);
# when they are missing and this runs as root with apt-get, they are installed, otherwise
# the script names them and fails.
set -euo pipefail
dir=${1:?usage: scripts/python313.sh DIR}
ver=3.13.5
sha=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
url=http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_$ver.orig.tar.xz
modules="import ssl, zlib, ctypes"

if [ -x "$dir/bin/python3.13" ] && "$dir/bin/python3.13" -c "$modules" 2>/dev/null; then
  exit 0
fi

missing=()
command -v make >/dev/null || missing+=(make)
command -v xz >/dev/null || missing+=(xz-utils)
[ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
ls /usr/include/ffi.h /usr/include/*/ffi.h >/dev/null 2>&1 || missing+=(libffi-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/python313.sh: building CPython needs ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$url" "$work/src.tar.xz" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=300) as r, open(sys.argv[2], "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
PY
echo "$sha  $work/src.tar.xz" | sha256sum -c --quiet -
tar -xJf "$work/src.tar.xz" -C "$work"
cd "$work/Python-$ver"
log=$work/build.log
if ! { ./configure --prefix="$dir" --disable-test-modules && make -j"$(nproc)" && make install; } >"$log" 2>&1; then
  tail -40 "$log" >&2
  echo "scripts/python313.sh: the CPython $ver build failed (the log's tail is above)" >&2
  exit 1
fi
"$dir/bin/python3.13" -c "$modules" || {
  echo "scripts/python313.sh: CPython $ver built without one of ssl, zlib, ctypes (see above)" >&2
  exit 1
}
