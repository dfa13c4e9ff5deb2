# Reads tests/where.tsv, the one declaration of where each test runs (sourced by
# tests/run.sh and docker/matrix.sh; plain bash, no other tool).
#
#   where_lines               the file's lines, comments and blank lines dropped:
#                             "binary unit suites lane", one space apart
#   where_binaries LANE..     the binaries with a line in one of the lanes, once each
#   where_check SUITES LIST   fails, naming every mismatch, when the file and the tests
#                             disagree; LIST: a file of "binary<TAB>test" lines, every
#                             test of every testbed binary (their --list), and of the
#                             ignored ones "binary<TAB>test<TAB>ignored"
where_file=${where_file:-tests/where.tsv}

where_lines() {
    local line
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%%#*}
        # shellcheck disable=SC2086 # the fields: words
        set -- $line
        [ $# -gt 0 ] || continue
        echo "$*"
    done <"$where_file"
}

where_binaries() {
    local binary unit suites lane seen=" "
    while read -r binary unit suites lane; do
        [[ " $* " == *" $lane "* ]] && [[ "$seen" != *" $binary "* ]] || continue
        seen+="$binary "
        echo "$binary"
    done < <(where_lines)
}

# The test targets under tests/ (cargo's own rule: tests/NAME.rs, tests/NAME/main.rs).
where_targets() {
    local f
    for f in tests/*.rs tests/*/main.rs; do
        [ -f "$f" ] || continue
        case $f in */main.rs) f=${f%/main.rs} ;; *) f=${f%.rs} ;; esac
        echo "${f#tests/}"
    done
}

# Does suite word list $1 (all, or a,b,c) hold suite $2?
where_on() { [ "$1" = all ] || [[ ",$1," == *",$2,"* ]]; }

# The source files of unit $2 of binary $1: the module's file, or the whole binary.
where_sources() {
    if [ "$2" != - ]; then
        echo "tests/$1/$2.rs"
    elif [ -d "tests/$1" ]; then
        find "tests/$1" -name '*.rs'
    else
        echo "tests/$1.rs"
    fi
}

# where_check's parts share its variables (bash's dynamic scope): errors, the
# known suites, and what each part learns for the next.

# The file's lines: fields, lanes, suites; whole[B] or modular[B] per binary,
# line_of["B UNIT"] its lane; every test target under tests/ with a line.
where_check_lines() {
    local binary unit suites lane t targets
    targets=" $(where_targets | tr '\n' ' ') "
    while read -r binary unit suites lane; do
        [ -n "$lane" ] || { errors+=("line '$binary $unit $suites': four fields"); continue; }
        [[ "$targets" == *" $binary "* ]] || errors+=("$binary: no tests/$binary.rs or tests/$binary/main.rs")
        case $lane in
        host) [ "$unit" = - ] && [ "$suites" = - ] || errors+=("$binary $unit: a host line is '$binary - - host'") ;;
        main | alt | first | -) ;;
        *) errors+=("$binary $unit: no lane $lane (host, alt, main, first, -)") ;;
        esac
        if [ "$lane" != host ]; then
            [ "$suites" = all ] || for t in ${suites//,/ }; do
                [[ "$known" == *" $t "* ]] || errors+=("$binary $unit: no suite $t")
            done
        fi
        if [[ "$unit" == *::* ]]; then
            [ "$lane" = - ] || errors+=("$binary $unit: a test's lane is its module's: -, not $lane")
            continue
        fi
        [ "$lane" != - ] || errors+=("$binary $unit: a module or binary has a lane")
        if [ "$unit" = - ]; then whole[$binary]=1; else modular[$binary]=1; fi
        # Several lines of one unit: each on its own suites.
        local each=${suites//,/ }
        [ "$suites" != all ] || each=$known
        for t in $each; do
            [ -z "${on_suites[$binary $unit $t]:-}" ] || errors+=("$binary $unit: two lines for suite $t")
            on_suites[$binary $unit $t]=1
        done
        line_of[$binary $unit]=$lane
    done < <(where_lines)
    for binary in $targets; do
        [ -n "${whole[$binary]:-}${modular[$binary]:-}" ] ||
            grep -q "^$binary - - host$" < <(where_lines) ||
            errors+=("tests/$binary: no line in $where_file")
    done
    for binary in "${!whole[@]}"; do
        [ -z "${modular[$binary]:-}" ] || errors+=("$binary: a line for the whole binary and lines for its modules")
    done
}

# Every test of a testbed binary under a line, none ignored: tests_of["B TEST"],
# unit_tests["B UNIT"] for the units that hold one.
where_check_tests() {
    local binary name ignored
    while IFS=$'\t' read -r binary name ignored; do
        [ -z "$ignored" ] || { errors+=("$binary $name: #[ignore]d ($where_file says where a test runs)"); continue; }
        tests_of[$binary $name]=1
        if [ -n "${whole[$binary]:-}" ]; then
            unit_tests[$binary -]=1
        elif [[ "$name" == *::* ]] && [ -n "${line_of[$binary ${name%%::*}]:-}" ]; then
            unit_tests[$binary ${name%%::*}]=1
        else
            errors+=("$binary $name: no line in $where_file")
        fi
    done <"$list"
}

# Every line names a test, module or binary that has a test; lane alt, and only
# alt, brings the testbed up in another configuration (calls testbed_with_*).
where_check_units() {
    local binary unit suites lane calls
    while read -r binary unit suites lane; do
        [ "$lane" != host ] || continue
        if [[ "$unit" == *::* ]]; then
            [ -n "${tests_of[$binary $unit]:-}" ] || errors+=("$binary $unit: no such test")
            [ -n "${line_of[$binary ${unit%%::*}]:-}" ] || errors+=("$binary $unit: no line for its module")
            continue
        fi
        [ -n "${unit_tests[$binary $unit]:-}" ] || errors+=("$binary $unit: no test")
        calls=0
        # shellcheck disable=SC2046 # the files: words
        ! grep -q 'testbed_with_' $(where_sources "$binary" "$unit") 2>/dev/null || calls=1
        if [ "$lane" = alt ] && [ $calls = 0 ]; then
            errors+=("$binary $unit: lane alt, but it calls no testbed_with_*")
        elif [ "$lane" != alt ] && [ $calls = 1 ]; then
            errors+=("$binary $unit: calls testbed_with_* (another configuration): lane alt")
        fi
    done < <(where_lines)
}

where_check() {
    local known=" $1 " list=$2 errors=()
    local -A line_of=() whole=() modular=() tests_of=() unit_tests=() on_suites=()
    where_check_lines
    where_check_tests
    where_check_units
    [ ${#errors[@]} -gt 0 ] || return 0
    printf '%s\n' "${errors[@]/#/$where_file: }" >&2
    return 1
}
