#!/usr/bin/env bash
# Install pdflatex (Debian texlive-latex-base + texlive-latex-recommended) for the LaTeX
# export test, if it is missing and apt-get exists. Quiet and non-interactive; runs
# `apt-get update` only when the first install attempt fails (stale or empty package lists).
set -euo pipefail

if command -v pdflatex >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-tex: pdflatex missing and apt-get not available; skipping" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-tex: not root and no sudo; cannot install TeX" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
PACKAGES=(texlive-latex-base texlive-latex-recommended)
install() {
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${PACKAGES[@]}" >/dev/null
}

if ! install; then
    $SUDO apt-get update -qq >/dev/null
    install
fi
command -v pdflatex >/dev/null 2>&1
