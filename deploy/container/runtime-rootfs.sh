#!/usr/bin/env bash
# The container's runtime root (Dockerfile, stage build; the runtime stage is
# FROM scratch and copies it): the tpoold package's files and only the shared
# libraries its programs and plugins load, as the build stage has them.
#
#   deploy/container/runtime-rootfs.sh TPOOLD_DEB ROOTFS
#
# - the .deb's files (tpoold, tpoolctl, the plugins, /etc/tpoold), without its
#   docs and systemd unit, which a container does not use;
# - every library `ldd` finds for each ELF file in it, copied under the name
#   the loader asks for (its soname), and the loader itself; the same
#   closure dpkg-shlibdeps turns into the package's Depends;
# - CA certificates (TLS to the daemon's peers), passwd/group with the
#   daemon's user (uid/gid 10001, as deploy/k8s runs it), nsswitch.conf, /tmp;
# - /etc/tpoold/container.toml (deploy/container/tpoold.toml), the empty
#   mount points it reads Secrets and plugins from (/etc/tpoold/tls, auth,
#   plugins.d: present in the image, so a read-only root stays unchanged
#   when they are mounted), /run/tpoold (0700, uid 10001) for the admin
#   socket and /var/lib/tpoold (0700, uid 10001) for the store's journal.
# Then it runs `tpoold --version` and `tpoolctl --version` chrooted into
# ROOTFS, so a missing library fails the build, not the container.
set -euo pipefail

deb=${1:?usage: runtime-rootfs.sh TPOOLD_DEB ROOTFS}
root=${2:?usage: runtime-rootfs.sh TPOOLD_DEB ROOTFS}
[[ -f "$deb" ]] || { echo "runtime-rootfs.sh: $deb: no such package (build it: cmake --build --preset release --target package)" >&2; exit 1; }

rm -rf "$root"
mkdir -p "$root"
dpkg-deb -x "$deb" "$root"
rm -rf "$root/usr/share/doc" "$root/usr/lib/systemd" "$root/lib/systemd"

# Merged /usr, as bookworm: the loader's paths (/lib64/ld-linux-x86-64.so.2,
# /lib/x86_64-linux-gnu) resolve into /usr.
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64"
ln -s usr/bin "$root/bin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

copy_lib() {  # copy_lib PATH: the file PATH names, at PATH under /usr
  local src=$1 rel dest
  rel=${src#/}
  rel=${rel#usr/}
  dest="$root/usr/$rel"
  [[ -e "$dest" ]] && return 0
  mkdir -p "$(dirname "$dest")"
  cp -L "$src" "$dest"
}

mapfile -t elves < <(find "$root" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print)
((${#elves[@]} > 0)) || { echo "runtime-rootfs.sh: no programs in $deb" >&2; exit 1; }
libs=0
for f in "${elves[@]}"; do
  out=$(ldd "$f") || { echo "runtime-rootfs.sh: ldd $f failed: $out" >&2; exit 1; }
  if grep -q 'not found' <<<"$out"; then
    echo "runtime-rootfs.sh: $f needs libraries this stage lacks:" >&2
    grep 'not found' <<<"$out" >&2
    exit 1
  fi
  while read -r path; do
    [[ -n "$path" ]] || continue
    copy_lib "$path"
    libs=$((libs + 1))
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done

mkdir -p "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
tpoold:x:10001:10001:tpoold:/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
tpoold:x:10001:
GROUP
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
# The container's config (the Dockerfile's CMD): TLS, tokens, the admin socket.
install -m 0644 "$(dirname "$0")/tpoold.toml" "$root/etc/tpoold/container.toml"
# Where the Secrets (tls.crt/tls.key/ca.crt, tokens) and the operator's
# plugins are mounted: empty here, root's and read-only to the daemon.
install -d -m 0755 "$root/etc/tpoold/tls" "$root/etc/tpoold/auth" "$root/etc/tpoold/plugins.d"
# The admin socket's directory: the daemon's alone (mount a tmpfs over it when
# the root is read-only; Kubernetes mounts an emptyDir).
mkdir -p "$root/run/tpoold"
chown 10001:10001 "$root/run/tpoold"
chmod 0700 "$root/run/tpoold"
# The durable store's directory ([store] path in container.toml), the
# Dockerfile's VOLUME: a new volume copies this owner and mode, so the
# daemon can create jobs.db, -wal and -shm in it and nobody else can read
# them (the journal holds payloads and outputs).
mkdir -p "$root/var/lib/tpoold"
chown 10001:10001 "$root/var/lib/tpoold"
chmod 0700 "$root/var/lib/tpoold"

chroot "$root" /usr/bin/tpoold --version >/dev/null
chroot "$root" /usr/bin/tpoolctl --version >/dev/null 2>&1 || chroot "$root" /usr/bin/tpoolctl --help >/dev/null
echo "runtime-rootfs.sh: $root: ${#elves[@]} programs and plugins, $(find "$root" -name '*.so*' -path '*x86_64-linux-gnu*' | wc -l) libraries, $(du -sh "$root" | cut -f1)"
