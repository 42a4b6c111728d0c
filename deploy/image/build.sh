#!/usr/bin/env bash
# Builds sluice's OCI image (deploy/image/Containerfile) from a built binary, offline: the image
# starts FROM scratch, and its root is made here from this machine's Debian packages, holding
# only what the binary loads (the shared libraries `ldd` lists, as Debian ships them, with their
# packages' copyright files and dpkg status), the CA bundle, and /etc/passwd and /etc/group with
# nobody (65534). No registry is asked for a base image and nothing is downloaded, so it builds
# in seconds wherever podman is installed (scripts/bootstrap.sh), `make test` included.
#
# In the image: /bin/sluice, and /bin/ratelimit a link to it that runs `sluice serve
# --envoy-env` (envoyproxy/ratelimit's command and environment variables: Envoy Gateway runs it
# unchanged); user 65534:65534; ports 8080 (HTTP), 8081 (gRPC), 6070 (debug/admin). docs/image.md.
#
#   deploy/image/build.sh [--binary build/release/sluice] [--tag NAME:TAG]... [--archive FILE]
#
# Without --tag: localhost/sluice:<version> and localhost/sluice:latest (the version from the
# binary's build directory, CMakeCache.txt). --archive also saves the image as an OCI archive
# (podman save --format oci-archive). Prints the image's id and size last.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
binary=$repo/build/release/sluice
tags=()
archive=
while (($#)); do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --tag) tags+=("$2"); shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--tag NAME:TAG]... [--archive FILE]" >&2; exit 2 ;;
  esac
done
[[ -x $binary ]] || { echo "build.sh: no binary at $binary (make build first)" >&2; exit 2; }
for tool in podman ldd dpkg-query strip; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (scripts/bootstrap.sh)" >&2; exit 2; }
done
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$(dirname "$binary")/CMakeCache.txt" 2>/dev/null || true)
version=${version:-$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")}
((${#tags[@]})) || tags=("localhost/sluice:$version" localhost/sluice:latest)

work=$(mktemp -d /tmp/sluice-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
lib=usr/lib/x86_64-linux-gnu
mkdir -p "$root"/{bin,etc/ssl/certs,tmp,"$lib",usr/lib64,usr/lib/ssl,usr/share/doc,var/lib/dpkg/status.d}
chmod 1777 "$root/tmp"
# Debian 12's merged /usr: /lib and /lib64 are links into /usr, where the loader looks.
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# The binary, without its symbols (a third of its size); `ratelimit` is the same file by name.
strip --strip-unneeded -o "$root/bin/sluice" "$binary"
chmod 755 "$root/bin/sluice"
ln -s sluice "$root/bin/ratelimit"

# Each library the binary loads, under the name it is loaded by (its soname), a copy of the file
# Debian installed; the dynamic loader at the path the binary names (/lib64, a link to usr/lib64).
libs=() spellings=()
while read -r name path; do
  real=$(readlink -f "$path")
  if [[ $name == */ld-linux-* ]]; then
    cp "$real" "$root/usr/lib64/$(basename "$name")"
  else
    cp "$real" "$root/$lib/$name"
  fi
  libs+=("$path")
  for f in "$path" "$real"; do  # (merged /usr: dpkg knows a file under one of two names)
    case $f in /usr/*) spellings+=("$f" "${f#/usr}") ;; *) spellings+=("$f" "/usr$f") ;; esac
  done
done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $1 ~ /^\/.*ld-linux/ {print $1, $1}')
# The packages that hold them (one dpkg-query for all: it is slow to start), each found once.
dpkg-query -S "${spellings[@]}" 2>/dev/null | sed -E 's/^([^:]+)(:[^: ]+)?: /\1 /' >"$work/owners" || true
packages=(ca-certificates)
for path in "${libs[@]}"; do
  real=$(readlink -f "$path")
  pkg=$(awk -v a="$path" -v b="$real" '{f = $2; sub(/^\/usr/, "", f)} f == a || "/usr" f == a || f == b || "/usr" f == b {print $1; exit}' "$work/owners")
  [[ -n $pkg ]] || { echo "build.sh: no Debian package holds $path" >&2; exit 1; }
  packages+=("$pkg")
done
# Each package's copyright file, and its dpkg status (as distroless images have them in
# /var/lib/dpkg/status.d, where image scanners look for what is installed).
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
for pkg in "${packages[@]}"; do
  name=${pkg%%:*}
  mkdir -p "$root/usr/share/doc/$name"
  cp "/usr/share/doc/$name/copyright" "$root/usr/share/doc/$name/copyright"
  dpkg-query -s "$pkg" >"$root/var/lib/dpkg/status.d/$name"
done

# TLS to Redis without REDIS_TLS_CACERT trusts the system's CAs: OpenSSL's default places
# (/usr/lib/ssl/cert.pem and certs/) lead to Debian's bundle.
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
ln -s /etc/ssl/certs/ca-certificates.crt "$root/usr/lib/ssl/cert.pem"
ln -s /etc/ssl/certs "$root/usr/lib/ssl/certs"
# The user it runs as, and name lookups from /etc/hosts then DNS (the runtime mounts both files
# over these).
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
: >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
chmod -R u=rwX,go=rX "$root"
chmod 1777 "$root/tmp"

tag_args=()
for t in "${tags[@]}"; do tag_args+=(--tag "$t"); done
# Dated as the binary (files and image): the same binary makes the same image, id included.
# The image the first tag named before, if this build took its last tag, is removed.
before=$(podman image inspect --format '{{.Id}}' "${tags[0]}" 2>/dev/null || true)
podman build --quiet --layers=false --timestamp "$(stat -c %Y "$binary")" \
  --file "$here/Containerfile" --build-arg "VERSION=$version" "${tag_args[@]}" "$work" >"$work/id"
id=$(cat "$work/id")
if [[ -n $before && $before != "$id"* &&
  -z $(podman image inspect --format '{{join .RepoTags ""}}' "$before" 2>/dev/null) ]]; then
  podman rmi "$before" >/dev/null 2>&1 || true
fi
if [[ -n $archive ]]; then
  rm -f "$archive"
  podman save --quiet --format oci-archive -o "$archive" "${tags[0]}"
fi
size=$(podman image inspect --format '{{.Size}}' "$id")
echo "image ${tags[*]} id ${id:0:12} size $size bytes ($((size / 1024 / 1024)) MiB), ${#packages[@]} Debian packages"
