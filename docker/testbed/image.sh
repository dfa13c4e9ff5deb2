# shellcheck shell=bash
# docker/testbed.sh's image: tfc-node:SUITE built from docker/node/Dockerfile on
# the suite's base image, the facts the configuration depends on (its Slurm version,
# whether it keeps accounts), and its Slurm headers copied out. Sourced by
# docker/testbed.sh, whose header documents it.

# The lines of the Dockerfile's stage $2 (from its FROM line, that line excluded, to
# `# end of stage slurm`).
stage_lines() {
    awk -v s="$2" '$1 == "FROM" && $NF == s { on = 1; next } on && /^# end of stage slurm$/ { exit }
        on { print }' "$1"
}

build_image() {
    bash "$here/base-image.sh" "$SUITE" "$BASE" || die "base image $BASE is missing and could not be created"
    mkdir -p "$RUN"
    # Stage full repeats stage slurm's lines so that they find its layers in the cache
    # (docker/node/Dockerfile says why): a change to one copy only is refused.
    local first
    first=$(stage_lines "$here/node/Dockerfile" slurm)
    if [ -z "$first" ] || [ "$first" != "$(stage_lines "$here/node/Dockerfile" full)" ]; then
        die "docker/node/Dockerfile: stage full must begin with stage slurm's lines, word for word"
    fi
    note "building image $IMAGE (stage $STAGE)"
    # CA certificates the host added to its trust store (a TLS-inspecting proxy's,
    # say) reach pip's downloads from PyPI in the TensorFlow layer; none: no effect.
    local extra_ca
    extra_ca=$(find /usr/local/share/ca-certificates -name '*.crt' -type f -print0 2>/dev/null |
        sort -z | xargs -0r cat)
    # The build context: docker/node (test-tools.sh and tfc_libuv.py are copied in).
    local ctx
    ctx=$(mktemp -d "${TMPDIR:-/tmp}/tfc-node-context.XXXXXX")
    cp -a "$here/node/." "$ctx/"
    if ! docker build --network host --build-arg "SUITE=$SUITE" --build-arg "BASE=$BASE" \
        --build-arg "EXTRA_CA_CERTS=$extra_ca" \
        --target "$STAGE" -t "$IMAGE" "$ctx" >"$RUN/build.log" 2>&1; then
        rm -rf "$ctx"
        tail -n 30 "$RUN/build.log" >&2
        die "docker build of $IMAGE failed (full log: $RUN/build.log)"
    fi
    rm -rf "$ctx"
    # `slurm-wlm 24.11.5` -> 24.11.5: the config written depends on it, and on
    # whether the image can keep accounts (slurmdbd and MariaDB).
    local facts
    facts=$(docker run --rm --entrypoint /bin/sh "$IMAGE" -c \
        '/usr/sbin/slurmd -V; if [ -x /usr/sbin/slurmdbd ] && [ -x /usr/sbin/mariadbd ]; then
             echo accounting; fi')
    SLURM_VERSION=$(head -n 1 <<<"$facts" | awk '{ print $NF }')
    [[ $SLURM_VERSION =~ ^[0-9]+\.[0-9]+ ]] || die "cannot tell the Slurm version of $IMAGE ('$SLURM_VERSION')"
    if grep -qx accounting <<<"$facts"; then ACCOUNTING=1; else ACCOUNTING=0; fi
    note "$IMAGE runs Slurm $SLURM_VERSION$([ $ACCOUNTING = 1 ] || echo ', without accounting (no slurmdbd)')"
}

# Copies the headers of the image's own Slurm (libslurm-dev is installed in the
# image) to $1/slurm, so that the plugin is built for exactly the Slurm it runs
# under. Kept while the image is unchanged.
cmd_headers() {
    local dir=${1:?usage: testbed.sh headers DIR} id tmp
    build_image
    id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
    mkdir -p "$dir" || die "cannot create $dir"
    if [ -f "$dir/slurm/spank.h" ] && [ "$(cat "$dir/.image-id" 2>/dev/null)" = "$id" ]; then
        note "headers of Slurm $SLURM_VERSION already in $dir/slurm"
        return 0
    fi
    tmp=$(mktemp -d "$dir/.slurm.XXXXXX")
    if ! docker run --rm --entrypoint tar "$IMAGE" -C /usr/include -c slurm | tar -C "$tmp" -x ||
        [ ! -f "$tmp/slurm/spank.h" ]; then
        rm -rf "$tmp"
        die "$IMAGE has no /usr/include/slurm/spank.h (libslurm-dev missing from docker/node/Dockerfile?)"
    fi
    rm -rf "$dir/slurm" "$dir/.image-id"
    mv "$tmp/slurm" "$dir/slurm"
    rmdir "$tmp"
    echo "$id" >"$dir/.image-id"
    note "headers of Slurm $SLURM_VERSION copied to $dir/slurm"
}
