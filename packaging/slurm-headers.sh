# shellcheck shell=bash
# What the scripts that build or package the plugin need to know of the Slurm
# headers they build against (sourced by packaging/deb.sh, packaging/install.sh,
# packaging/rpm/tf-cluster.spec and docker/matrix.sh):
#
#   headers_digest INCLUDE     the SHA-256 of the names and contents of
#                              INCLUDE/slurm/*.h: passed to cargo as
#                              TFC_SLURM_HEADERS_DIGEST, which build.rs declares
#                              (rerun-if-env-changed), so that headers of other
#                              content rebuild the plugin even when their times
#                              are older than the last build (cargo compares
#                              times only)
#   plugin_version SO          the u32 the exported plugin_version of SO holds,
#                              read from the file (nm, readelf, od: binutils)
#   plugin_mismatch SO V       prints why SO is not a build for the Slurm of
#                              SLURM_VERSION_NUMBER V and fails; nothing when it is
#   slurm_release V            MM.mm.uu of a SLURM_VERSION_NUMBER

headers_digest() {
    (cd "$1/slurm" && LC_ALL=C sha256sum -- *.h) | sha256sum | cut -d' ' -f1
}

# The u32 plugin_version's .dynsym entry points at (file offset from the LOAD
# segment holding that address).
plugin_version() {
    local addr off vaddr filesz
    addr=$(nm -D --defined-only "$1" 2>/dev/null | awk '$3 == "plugin_version" { print $1 }')
    [ -n "$addr" ] || return 1
    addr=$((16#$addr))
    while read -r off vaddr filesz; do
        if ((addr >= vaddr && addr < vaddr + filesz)); then
            od -An -tu4 -j $((addr - vaddr + off)) -N4 "$1" | tr -d ' '
            return
        fi
    done < <(readelf -lW "$1" | awk '$1 == "LOAD" { print $2, $3, $5 }' |
        while read -r o va fs; do echo $((o)) $((va)) $((fs)); done)
    return 1
}

# MM.mm.uu of a SLURM_VERSION_NUMBER.
slurm_release() {
    echo "$(($1 >> 16)).$(printf %02d $((($1 >> 8) & 255))).$(($1 & 255))"
}

plugin_mismatch() {
    local built
    built=$(plugin_version "$1") || { echo "$1: no plugin_version symbol"; return 1; }
    [ "$built" != "$(($2))" ] || return 0
    echo "$1 was built for Slurm $(slurm_release "$built"), not $(slurm_release "$(($2))")"
    return 1
}
