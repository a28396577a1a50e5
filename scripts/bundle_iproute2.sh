#!/usr/bin/env bash
# Bundles this machine's iproute2 `ip`, `tc`, `ss` and `nstat` (and iperf3,
# when installed, for `mccl netlab goodput`) with their shared libraries and dynamic loader
# into DIR (default .labtools), for running `mccl netlab` on a machine that
# has no iproute2 and no package access (the H200 box):
#   bash scripts/bundle_iproute2.sh .labtools     # here (Debian, iproute2 installed)
#   PATH=$PWD/.labtools:$PATH mccl netlab up 4    # there, as root
# The wrappers start the binaries through the bundled loader with
# --library-path, so nothing (LD_LIBRARY_PATH included) leaks into the
# programs that `ip netns exec` starts.
set -euo pipefail
dir=${1:-.labtools}
mkdir -p "$dir/lib"
tools="ip tc ss nstat"
if command -v iperf3 >/dev/null; then tools="$tools iperf3"; else echo "bundle_iproute2: no iperf3 here (apt-get install iperf3); bundling iproute2 only" >&2; fi
for b in $tools; do
  path=$(command -v "$b") || { echo "bundle_iproute2: no '$b' here (apt-get install iproute2)" >&2; exit 2; }
  cp "$path" "$dir/lib/$b.bin"
  ldd "$path" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    [ -f "$lib" ] && cp -L "$lib" "$dir/lib/"
  done
  cat > "$dir/$b" <<WRAP
#!/bin/sh
d=\$(dirname "\$(readlink -f "\$0")")
exec "\$d/lib/ld-linux-x86-64.so.2" --library-path "\$d/lib" "\$d/lib/$b.bin" "\$@"
WRAP
  chmod +x "$dir/$b"
done
"$dir/ip" -V
[ ! -x "$dir/iperf3" ] || "$dir/iperf3" --version | head -1
