# Unpack the GPU bundle (make gpu-bundle: build/gpu-bundle) and put it on PYTHONPATH ahead of the image's packages,
# on a GPU machine without network (docs/gpu_bundle.md). Source it from bash, with the image's Python as python3 or
# $PYTHON:
#
#   source gpu_bundle/activate.sh
#
# - unpacks ray.tar.xz and deps.tar.xz into build/gpu-site (DARA_GPU_SITE), once per bundle (a stamp file holds the
#   archives' checksums; a new bundle replaces the folder);
# - unpacks data.tar.xz (the verl_cpu scale's tool-calling warm start and verl data) at the repository root, without
#   replacing files already there;
# - exports PYTHONPATH=<repository>/src:<site>:$PYTHONPATH (transformers at verl's pin wins over the image's; dara
#   runs from the checkout, its verl.plugins entry point comes from the site's dara record) and DARA_GPU_SITE;
# - runs gpu_bundle/check_imports.py (every module the paper path starts from, the bundle's versions, dara's plugin):
#   DARA_GPU_BUNDLE_CHECK=0 skips it.
# Returns non-zero, with the reason, when something is missing. The bundle's folder is DARA_GPU_BUNDLE if set.
# GNU tar unpacks .tar.xz with the xz program; where an image lacks it (xz-utils is not in every minimal image),
# Python's tarfile unpacks them instead.

_dara_gpu_bundle_untar() {  # ARCHIVE FOLDER [keep]: keep leaves files already in FOLDER as they are
    if command -v xz >/dev/null 2>&1; then
        tar -xJf "$1" -C "$2" ${3:+--skip-old-files}
        return
    fi
    "${PYTHON:-python3}" - "$1" "$2" "${3:-}" <<'PYTHON_UNTAR'
import os, sys, tarfile
archive, folder, keep = sys.argv[1:4]
with tarfile.open(archive) as tar:
    members = [m for m in tar if not (keep and not m.isdir() and os.path.lexists(os.path.join(folder, m.name)))]
    # the 'tar' filter: no paths outside folder, file modes (executables) kept
    tar.extractall(folder, members=members, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
PYTHON_UNTAR
}

_dara_gpu_bundle_activate() {
    local root bundle site python stamp archive status
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
    bundle="${DARA_GPU_BUNDLE:-$root/build/gpu-bundle}"
    site="${DARA_GPU_SITE:-$root/build/gpu-site}"
    python="${PYTHON:-python3}"
    for archive in ray.tar.xz deps.tar.xz MANIFEST.json; do
        if [ ! -f "$bundle/$archive" ]; then
            echo "gpu bundle: no $bundle/$archive; build it with make gpu-bundle and carry build/gpu-bundle" >&2
            return 1
        fi
    done
    stamp="$(cd "$bundle" && cksum ray.tar.xz deps.tar.xz MANIFEST.json)" || return 1
    if [ "$(cat "$site/.bundle-stamp" 2>/dev/null)" != "$stamp" ]; then
        echo "gpu bundle: unpacking $bundle into $site" >&2
        rm -rf "$site" && mkdir -p "$site" || return 1
        # both archives at once: xz decompression is single-threaded
        _dara_gpu_bundle_untar "$bundle/ray.tar.xz" "$site" & local ray_job=$!
        _dara_gpu_bundle_untar "$bundle/deps.tar.xz" "$site"; status=$?
        wait "$ray_job" || status=1
        if [ "$status" -ne 0 ]; then
            echo "gpu bundle: unpacking failed; $site is incomplete" >&2
            return 1
        fi
        printf '%s\n' "$stamp" > "$site/.bundle-stamp"
    fi
    if [ -f "$bundle/data.tar.xz" ]; then
        _dara_gpu_bundle_untar "$bundle/data.tar.xz" "$root" keep || return 1
    fi
    case ":${PYTHONPATH:-}:" in
        *":$root/src:$site:"*) ;;
        *) export PYTHONPATH="$root/src:$site${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
    export DARA_GPU_SITE="$site"
    if [ "${DARA_GPU_BUNDLE_CHECK:-1}" != 0 ]; then
        "$python" "$root/gpu_bundle/check_imports.py" --site "$site" || return 1
    fi
}

_dara_gpu_bundle_activate
_dara_gpu_bundle_status=$?
unset -f _dara_gpu_bundle_activate _dara_gpu_bundle_untar
# `return` when sourced, `exit` when run as a script (which cannot export to its caller, but still checks the bundle)
return "$_dara_gpu_bundle_status" 2>/dev/null || exit "$_dara_gpu_bundle_status"
