#!/usr/bin/env bash
# Builds tf-cluster against a Slurm's own headers and installs it beside that
# Slurm, wherever it lives: a source build under a prefix, SchedMD's RPMs,
# Spack, or any other layout (docs/admin.md, "Installing beside a Slurm that
# is not Debian's").
#
#   bash packaging/install.sh --slurm-prefix DIR [--sysconfdir DIR] [--prefix DIR]
#                             [--plugin-dir DIR] [--destdir DIR] [--no-build] [--dry-run]
#
# Installs (DESTDIR before each path when --destdir is given):
#   PLUGINDIR/tf_cluster.so                  the plugin, by rename (a running
#       slurmstepd keeps the old file); PLUGINDIR: --plugin-dir, else
#       SLURM_PREFIX/lib64/slurm or SLURM_PREFIX/lib/slurm, whichever exists
#   PREFIX/bin/tf-cluster                    the CLI (env, explain, doctor)
#   PREFIX/share/man/man1/tf-cluster.1       its manual
#   PREFIX/share/doc/tf-cluster/             README, docs/, examples/, … (docs.list)
#   SYSCONFDIR/plugstack.conf.d/tf-cluster.conf   the plugstack line naming
#       PLUGINDIR/tf_cluster.so; an existing, different one is kept and the
#       new one written beside it as tf-cluster.conf.new
# PREFIX defaults to /usr/local; SYSCONFDIR (where slurm.conf and
# plugstack.conf are) to /etc/slurm for --slurm-prefix /usr, else
# SLURM_PREFIX/etc. The build reads SLURM_PREFIX/include/slurm (spank.h,
# slurm.h, slurm_version.h), and the plugin's plugin_version is that
# SLURM_VERSION_NUMBER: it loads only in that Slurm release (major.minor).
# Nothing else is changed: plugstack.conf must include the snippet's folder
# (the script says so when it does not). A plugin directory or sysconfdir
# that plugstack.conf cannot hold (a blank, '#', a glob or any other special)
# is refused before anything is built or written; --dry-run makes every check.
#
# Environment: CARGO_TARGET_DIR (target), CARGO (cargo). Needs cargo (Rust >=
# 1.85), libclang (bindgen), nm and readelf (binutils).
set -euo pipefail
umask 022
# Byte-wise character classes for the path checks below (not exported).
LC_ALL=C
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "install: error: $*" >&2; exit 1; }
# shellcheck source=packaging/slurm-headers.sh
source "$repo/packaging/slurm-headers.sh"
usage() {
    echo "usage: bash packaging/install.sh --slurm-prefix DIR [--sysconfdir DIR] [--prefix DIR]"
    echo "           [--plugin-dir DIR] [--destdir DIR] [--no-build] [--dry-run]"
}

slurm_prefix='' sysconfdir='' prefix=/usr/local plugin_dir='' destdir='' dry=0 build=1
while [ $# -gt 0 ]; do
    opt=$1 val=
    case $opt in
    --*=*) val=${opt#*=} opt=${opt%%=*} ;;
    esac
    case $opt in
    --slurm-prefix | --sysconfdir | --prefix | --plugin-dir | --destdir)
        if [ -z "$val" ]; then
            [ $# -ge 2 ] || die "$opt needs a directory"
            val=$2
            shift
        fi
        [ -n "$val" ] || die "$opt needs a directory"
        case $opt in
        --slurm-prefix) slurm_prefix=$val ;;
        --sysconfdir) sysconfdir=$val ;;
        --prefix) prefix=$val ;;
        --plugin-dir) plugin_dir=$val ;;
        --destdir) destdir=$val ;;
        esac
        ;;
    --no-build) build=0 ;;
    --dry-run | -n) dry=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
    esac
    shift
done
[ -n "$slurm_prefix" ] || { usage >&2; die "--slurm-prefix is required (the Slurm to build for)"; }
for d in "$slurm_prefix" "$prefix" ${sysconfdir:+"$sysconfdir"} ${plugin_dir:+"$plugin_dir"}; do
    [[ $d == /* ]] || die "$d: give absolute paths"
done
[ -z "$destdir" ] || [[ $destdir == /* ]] || destdir=$PWD/$destdir
slurm_prefix=${slurm_prefix%/}
[ -n "$slurm_prefix" ] || slurm_prefix=/

include=$slurm_prefix/include
version_h=$include/slurm/slurm_version.h
for h in spank.h slurm.h slurm_version.h; do
    [ -f "$include/slurm/$h" ] ||
        die "$include/slurm/$h not found: is $slurm_prefix the prefix Slurm was installed under? (RPMs: slurm-devel)"
done
v=$(awk '/^#define SLURM_VERSION_NUMBER/ { print $3 }' "$version_h")
[[ $v =~ ^0x[0-9a-fA-F]+$ ]] || die "no SLURM_VERSION_NUMBER in $version_h"
v=$((v))
slurm=$((v >> 16)).$(printf %02d $(((v >> 8) & 255))).$((v & 255))

if [ -z "$plugin_dir" ]; then
    for d in "$slurm_prefix/lib64/slurm" "$slurm_prefix/lib/slurm"; do
        if [ -d "$d" ]; then plugin_dir=$d; break; fi
    done
    [ -n "$plugin_dir" ] ||
        die "neither $slurm_prefix/lib64/slurm nor $slurm_prefix/lib/slurm exists: give --plugin-dir (scontrol show config | grep PluginDir)"
fi
if [ -z "$sysconfdir" ]; then
    if [ "$slurm_prefix" = /usr ]; then sysconfdir=/etc/slurm; else sysconfdir=$slurm_prefix/etc; fi
fi
[ "$plugin_dir" = / ] || plugin_dir=${plugin_dir%/}
[ "$sysconfdir" = / ] || sysconfdir=${sysconfdir%/}
so_path=${plugin_dir%/}/tf_cluster.so
docdir=$prefix/share/doc/tf-cluster
snippet=$sysconfdir/plugstack.conf.d/tf-cluster.conf
include_line="include $sysconfdir/plugstack.conf.d/*.conf"

# Every check comes before anything is written, and --dry-run makes them all.
#
# plugstack.conf splits a line at blanks, cuts it at '#' and reads at most
# 4095 bytes of it, and an include line is a glob: the plugin's path and the
# snippet's folder go there only when made of characters Slurm reads as
# themselves. Anything else is refused here rather than written into a line
# that makes Slurm load another file (and, with `required`, fail every srun).
plain='A-Za-z0-9._+,:@=/-'
plugstack_path() { # PATH OPTION WHAT
    local rest=${1//[$plain]/} c
    if [ -n "$rest" ]; then
        c=${rest:0:1}
        case $c in
        ' ') c='a blank' ;;
        $'\t') c='a tab' ;;
        $'\n') c='a line break' ;;
        [[:graph:]]) c="'$c'" ;;
        *) c="the byte $(printf %q "$c")" ;;
        esac
        die "$3 $(printf %q "$1") has $c, which plugstack.conf cannot hold (it splits lines at" \
            "blanks, cuts them at '#', and include lines are globs): give $2 a path of letters," \
            "digits and . _ + , : @ = / - only (a symbolic link to the directory will do)"
    fi
    [ "${#1}" -le 4000 ] ||
        die "$3 is ${#1} bytes long; plugstack.conf reads lines of at most 4095: give $2 a shorter path"
}
plugstack_path "$so_path" --plugin-dir "the plugin's path"
plugstack_path "$sysconfdir/plugstack.conf.d" --sysconfdir "the snippet's folder"
if [ "$build" = 1 ]; then
    command -v "${CARGO:-cargo}" >/dev/null ||
        die "${CARGO:-cargo} not found: install Rust >= 1.85 (rustup), or give --no-build with a build in ${CARGO_TARGET_DIR:-target}"
fi
for t in nm readelf od; do
    command -v "$t" >/dev/null || die "$t not found: install binutils and coreutils (nm, readelf and od read the plugin's plugin_version)"
done

# Each change, shown (--dry-run: only shown).
run() {
    printf '%q ' "$@" | sed 's/ $//'
    echo
    [ "$dry" = 1 ] || "$@"
}

echo "install: tf-cluster for Slurm $slurm ($include); plugin in $plugin_dir," \
    "snippet in $sysconfdir/plugstack.conf.d, the rest under $prefix${destdir:+ (staged in $destdir)}" >&2
cd "$repo"
target=${CARGO_TARGET_DIR:-target}
so=$target/release/libtf_cluster.so cli=$target/release/tf-cluster
if [ "$build" = 1 ]; then
    # TFC_CLI_PATH: where the plugin's GPU probe finds the CLI installed below.
    run env SLURM_INCLUDE_DIR="$include" TFC_SLURM_HEADERS_DIGEST="$(headers_digest "$include")" \
        TFC_CLI_PATH="$prefix/bin/tf-cluster" "${CARGO:-cargo}" build --release --quiet -p tf-cluster -p tf-cluster-cli
fi

# The build checked against the headers: before the install, and with
# --dry-run too where there is a build to check (with --no-build).
check_build() {
    if [ ! -f "$so" ] || [ ! -f "$cli" ]; then
        die "$so or $cli is missing (built? CARGO_TARGET_DIR?)"
    fi
    built=$(plugin_version "$so") || die "$so: no plugin_version symbol"
    [ "$built" = "$v" ] || die "$so was built for Slurm $((built >> 16)).$(printf %02d $(((built >> 8) & 255))).$((built & 255)), not $slurm: build again (without --no-build)"
}
if [ "$dry" = 0 ] || [ "$build" = 0 ]; then
    check_build
else
    echo "# then: the build's plugin_version is checked against $version_h"
fi

# The snippet: plugstack.conf.example with this plugin's path on its line.
new='' lines=0
while IFS= read -r line || [ -n "$line" ]; do
    if [[ $line =~ ^required[[:space:]]+[^[:space:]]*tf_cluster\.so([[:space:]].*)?$ ]]; then
        line="required $so_path${BASH_REMATCH[1]}"
        lines=$((lines + 1))
    fi
    new+=$line$'\n'
done <plugstack.conf.example
new=${new%$'\n'}
[ "$lines" = 1 ] || die "plugstack.conf.example has $lines 'required …tf_cluster.so' lines, not one"
run install -d "$destdir$plugin_dir"
run install -m 644 "$so" "$destdir$plugin_dir/tf_cluster.so.new"
run mv -f "$destdir$plugin_dir/tf_cluster.so.new" "$destdir$plugin_dir/tf_cluster.so"
run install -D -m 755 "$cli" "$destdir$prefix/bin/tf-cluster"
run install -D -m 644 cli/tf-cluster.1 "$destdir$prefix/share/man/man1/tf-cluster.1"
while read -r entry; do
    case $entry in '' | '#'*) continue ;; esac
    if [ -d "$entry" ]; then
        while IFS= read -r -d '' f; do
            run install -D -m 644 "$f" "$destdir$docdir/$f"
        done < <(find "$entry" -type f -print0 | sort -z)
    else
        run install -D -m 644 "$entry" "$destdir$docdir/$entry"
    fi
done <packaging/docs.list

dest=$destdir$snippet
if [ -f "$dest" ] && [ "$(cat "$dest")" != "$new" ]; then
    echo "install: $snippet exists and differs: kept; the new one is $snippet.new" >&2
    dest=$dest.new
fi
echo "# write $dest:"
grep -v '^#' <<<"$new"
if [ "$dry" = 0 ]; then
    install -d "$(dirname "$dest")"
    printf '%s\n' "$new" >"$dest.tmp"
    chmod 644 "$dest.tmp"
    mv -f "$dest.tmp" "$dest"
fi

# Whether plugstack.conf (staged or in place) includes the snippet's folder.
conf=$sysconfdir/plugstack.conf
included=0
for f in "$destdir$conf" "$conf"; do
    [ -r "$f" ] || continue
    while IFS= read -r line || [ -n "$line" ]; do
        if [[ $line =~ ^[[:space:]]*include[[:space:]]+([^[:space:]#]+) ]] &&
            [[ ${BASH_REMATCH[1]} == "$sysconfdir/plugstack.conf.d/"* ]]; then
            included=1
        fi
    done <"$f"
done
if [ "$included" = 0 ]; then
    echo "install: to enable the plugin, add '$include_line' to" \
        "$conf (or the file PlugStackConfig names), on every node and submit host" >&2
fi
echo "install: done${destdir:+ (staged in $destdir)}; check a node with: tf-cluster doctor" >&2
