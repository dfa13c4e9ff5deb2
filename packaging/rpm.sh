#!/usr/bin/env bash
# Builds the RPM of tf-cluster (packaging/rpm/tf-cluster.spec) from this
# checkout, for the Slurm whose headers are installed:
#
#   bash packaging/rpm.sh [OUTDIR]        OUTDIR defaults to target/rpm
#
# -> OUTDIR/tf-cluster-<version>-1.slurm<MM.mm><dist>.<arch>.rpm (the only .rpm
# left there). The source tarball (the checkout's files, as `git archive` of the
# work tree would give) goes to OUTDIR/rpmbuild/SOURCES, so the same spec
# builds from it on a RHEL-family machine. With rpm >= 4.18 the build runs in
# the checkout (--build-in-place: cargo's target dir is reused), else from the
# tarball.
#
# Environment: SLURM_INCLUDE_DIR (/usr/include), CARGO_TARGET_DIR,
# RPMBUILD_ARGS (more rpmbuild arguments, e.g. for OpenHPC:
# "--define 'slurm_pkg slurm-ohpc' --define 'slurm_devel_pkg slurm-devel-ohpc'").
# On a machine whose rpm database does not hold Slurm (Debian with the `rpm`
# package), BuildRequires cannot be checked and --nodeps is passed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${1:-target/rpm}
include=${SLURM_INCLUDE_DIR:-/usr/include}
die() { echo "rpm: error: $*" >&2; exit 1; }
command -v rpmbuild >/dev/null || die "rpmbuild is missing (Debian: apt-get install rpm; RHEL: dnf install rpm-build)"
[ -f "$include/slurm/slurm_version.h" ] || die "$include/slurm/slurm_version.h not found (slurm-devel, or SLURM_INCLUDE_DIR)"

# The version the build carries (buildinfo.rs: Cargo.toml's, with the revision
# for a development build), from the CLI built here; the spec's build gets it as
# TF_CLUSTER_VERSION, since the tarball has no .git.
SLURM_INCLUDE_DIR=$include cargo build --release --quiet -p tf-cluster-cli
version=$("${CARGO_TARGET_DIR:-target}/release/tf-cluster" --version | awk '{ print $2 }')
[[ $version =~ ^[0-9][0-9A-Za-z.~+]*$ ]] || die "no version from tf-cluster --version: '$version'"
mkdir -p "$out"
out=$(cd "$out" && pwd)
top=$out/rpmbuild
rm -rf "$top"
mkdir -p "$top"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}

# The source tarball: tracked and new files of the work tree, not target/.
files=$(git ls-files --cached --others --exclude-standard)
tar -czf "$top/SOURCES/tf-cluster-$version.tar.gz" --transform "s#^#tf-cluster-$version/#" $files

# The CLI's manual, /usr/share/man/man1/tf-cluster.1 (rpm compresses it): put
# in the spec's %install and %files here, unless the spec already names it.
spec=packaging/rpm/tf-cluster.spec
if ! grep -q 'tf-cluster\.1' "$spec"; then
    awk '{ print }
        /^%install$/ { install = 1 }
        install && /^install -D -m 755 .*tf-cluster /{
            print "install -D -m 644 cli/tf-cluster.1 %{buildroot}%{_mandir}/man1/tf-cluster.1"; install = 0 }
        /^%files$/ { print "%{_mandir}/man1/tf-cluster.1*" }' "$spec" >"$top/SPECS/tf-cluster.spec"
    spec=$top/SPECS/tf-cluster.spec
    grep -q 'man1/tf-cluster.1\*$' "$spec" && grep -q '_mandir}/man1/tf-cluster.1$' "$spec" ||
        die "could not add the manual to $spec"
fi

args=(--define "_topdir $top" --define "tfc_version $version" --define "slurm_include_dir $include")
rpm -q "$(rpm --eval '%{?slurm_devel_pkg}%{!?slurm_devel_pkg:slurm-devel}')" >/dev/null 2>&1 || args+=(--nodeps)
if rpmbuild --help 2>/dev/null | grep -q -- --build-in-place; then args+=(--build-in-place); fi
eval "extra=(${RPMBUILD_ARGS:-})"
echo "rpm: building tf-cluster $version against $include" >&2
rpmbuild -bb "${args[@]}" "${extra[@]}" "$spec" >"$top/build.log" 2>&1 ||
    { tail -n 30 "$top/build.log" >&2; die "rpmbuild failed (log: $top/build.log)"; }
rm -f "$out"/tf-cluster-*.rpm
find "$top/RPMS" -name 'tf-cluster-*.rpm' -exec mv {} "$out/" \;
rpm=$(ls "$out"/tf-cluster-*.rpm)
echo "rpm: $rpm ($(stat -c %s "$rpm") bytes)" >&2
echo "$rpm"
