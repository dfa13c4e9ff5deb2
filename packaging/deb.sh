#!/usr/bin/env bash
# Builds the Debian package of tf-cluster for the Slurm whose headers are
# installed (libslurm-dev), on a Debian/Ubuntu machine:
#
#   bash packaging/deb.sh [OUTDIR]        OUTDIR defaults to target/deb
#
# -> OUTDIR/tf-cluster_<version>+slurm<MM.mm>_<arch>.deb (the only .deb left
# there), e.g. tf-cluster_0.2.0+slurm24.11_amd64.deb (a release) or
# tf-cluster_0.2.0~dev.412.g1a2b3c4d5e+slurm24.11_amd64.deb (a development
# build: the version `tf-cluster --version` prints, buildinfo.rs), holding
#   /usr/lib/<multiarch>/slurm-wlm/tf_cluster.so   the plugin (Debian's Slurm plugin dir)
#   /usr/bin/tf-cluster                          the CLI (env, explain, doctor)
#   /usr/share/man/man1/tf-cluster.1.gz          its manual (cli/tf-cluster.1)
#   /usr/share/tf-cluster/tf-cluster.conf        the plugstack snippet, which the
#       postinst copies to /etc/slurm/plugstack.conf.d/ (read by the include
#       line of the plugstack.conf that slurm-wlm-basic-plugins ships)
#   /usr/share/doc/tf-cluster/                   copyright and the docs of
#       packaging/docs.list (README.md, docs/, examples/, …) as in the checkout
# and Pre-Depends on slurm-wlm-basic-plugins (>= MM.mm) and (<< MM.mm+1~): apt
# and dpkg refuse it next to another Slurm release (docs/packaging.md).
#
# Environment: SLURM_INCLUDE_DIR (/usr/include: the headers to build against,
# as build.rs reads them), CARGO_TARGET_DIR (target), TFC_DEB_NO_BUILD=1
# (package what $CARGO_TARGET_DIR/release already holds). The .so's
# plugin_version must be the headers' SLURM_VERSION_NUMBER, or no package is
# made. Needs cargo, dpkg-deb, cc, binutils (objdump, nm, readelf).
set -euo pipefail
umask 022
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${1:-target/deb}
include=${SLURM_INCLUDE_DIR:-/usr/include}
target=${CARGO_TARGET_DIR:-target}
die() { echo "deb: error: $*" >&2; exit 1; }
# shellcheck source=packaging/slurm-headers.sh
source packaging/slurm-headers.sh

version_h=$include/slurm/slurm_version.h
[ -f "$version_h" ] || die "$version_h not found: install libslurm-dev or set SLURM_INCLUDE_DIR"
v=$(awk '/^#define SLURM_VERSION_NUMBER/ { print $3 }' "$version_h")
[[ $v =~ ^0x[0-9a-fA-F]+$ ]] || die "no SLURM_VERSION_NUMBER in $version_h"
v=$((v))
major=$((v >> 16)) minor=$(((v >> 8) & 255))
slurm=$major.$(printf %02d $minor)
# The next release after MM.mm: Slurm numbers them YY.MM (22.05, 23.02, 24.11);
# anything below MM.(mm+1) is this release, its micro versions included.
slurm_next=$major.$(printf %02d $((minor + 1)))
arch=$(dpkg --print-architecture)
multiarch=$(cc -print-multiarch 2>/dev/null || true)
[ -n "$multiarch" ] || die "cannot tell the multiarch triplet (cc -print-multiarch)"
plugin_dir=/usr/lib/$multiarch/slurm-wlm

if [ "${TFC_DEB_NO_BUILD:-0}" != 1 ]; then
    echo "deb: building tf-cluster against Slurm $slurm ($include)" >&2
    SLURM_INCLUDE_DIR=$include TFC_SLURM_HEADERS_DIGEST=$(headers_digest "$include") \
        CARGO_TARGET_DIR=$target cargo build --release --quiet
fi
so=$target/release/libtf_cluster.so cli=$target/release/tf-cluster
[ -f "$so" ] && [ -f "$cli" ] || die "$so or $cli is missing"
# The package names the headers' release: it holds a plugin of theirs or none.
why=$(plugin_mismatch "$so" "$v") || die "$why (the headers in $include)"
# The version the build carries (buildinfo.rs: Cargo.toml's, with the revision
# for a development build), as `tf-cluster --version` prints it.
build_version=$("$cli" --version | awk '{ print $2 }')
[[ $build_version =~ ^[0-9][0-9A-Za-z.~+]*$ ]] || die "$cli --version: no version in '$("$cli" --version)'"
version=$build_version+slurm$slurm

stage=$(mktemp -d "${TMPDIR:-/tmp}/tf-cluster-deb.XXXXXX")
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT
install -D -m 644 "$so" "$stage$plugin_dir/tf_cluster.so"
install -D -m 755 "$cli" "$stage/usr/bin/tf-cluster"
install -D -m 644 cli/tf-cluster.1 "$stage/usr/share/man/man1/tf-cluster.1"
gzip -9n "$stage/usr/share/man/man1/tf-cluster.1"
# The snippet: plugstack.conf.example's line, with the packaged path.
mkdir -p "$stage/usr/share/tf-cluster"
sed -E "s#[^[:space:]]*tf_cluster\.so#$plugin_dir/tf_cluster.so#" plugstack.conf.example \
    >"$stage/usr/share/tf-cluster/tf-cluster.conf"
grep -q "^required $plugin_dir/tf_cluster.so" "$stage/usr/share/tf-cluster/tf-cluster.conf" ||
    die "plugstack.conf.example has no 'required …tf_cluster.so' line"
doc=$stage/usr/share/doc/tf-cluster
mkdir -p "$doc"
install -m 644 packaging/debian/copyright "$doc/copyright"
# The docs of packaging/docs.list, uncompressed and under their own paths, so
# that the README's relative links (docs/admin.md, examples/…) resolve here.
while read -r entry; do
    case $entry in '' | '#'*) continue ;; esac
    [ -e "$entry" ] || die "packaging/docs.list: $entry does not exist"
    if [ -d "$entry" ]; then
        find "$entry" -type f -print0 | xargs -0 -I{} install -D -m 644 {} "$doc/{}"
    else
        install -D -m 644 "$entry" "$doc/$entry"
    fi
done <packaging/docs.list

# Shared libraries: the glibc symbol versions used, and Rust's unwinder.
glibc=$(objdump -T "$so" "$cli" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
shlibs="libc6 (>= $glibc)"
if readelf -d "$so" "$cli" | grep -q 'NEEDED.*libgcc_s'; then shlibs="$shlibs, libgcc-s1"; fi

mkdir -p "$stage/DEBIAN"
for f in preinst postinst prerm postrm; do
    install -m 755 "packaging/debian/$f" "$stage/DEBIAN/$f"
done
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    -e "s/@SLURM@/$slurm/g" -e "s/@SLURM_NEXT@/$slurm_next/g" -e "s/@SHLIBS@/$shlibs/" \
    packaging/debian/control.in >"$stage/DEBIAN/control"

mkdir -p "$out"
rm -f "$out"/tf-cluster_*.deb
deb=$out/tf-cluster_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "deb: $deb ($(stat -c %s "$deb") bytes; plugin for Slurm $slurm)" >&2
echo "$deb"
