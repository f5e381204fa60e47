"""The image's CPU base made here: Debian bookworm by debootstrap (minbase), slimmed the way Debian's slim
images are (no documentation, manual pages or translations, now or when the Dockerfile's apt-get installs
more; no package lists or archives kept), imported into podman as one local image.

The root filesystem is cached as a tarball under the cache folder, named by its recipe; the imported image
carries the recipe as a label, so a re-run finds it and the build's layer cache stays valid.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.image.podman import PodmanError, inspect, podman

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
TAG = f"localhost/translator-base:{SUITE}"
LABEL = "org.translator.base.recipe"
# what Debian's slim images leave out of every package (/etc/dpkg/dpkg.cfg.d/docker there)
DPKG_EXCLUDES = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
"""
# apt keeps no downloaded archives or package caches in a layer (/etc/apt/apt.conf.d/docker-clean)
_APT_RM = ("rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin"
           " || true")
APT_CLEAN = f"""DPkg::Post-Invoke {{ "{_APT_RM}"; }};
APT::Update::Post-Invoke {{ "{_APT_RM}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""
RECIPE_VERSION = "1"  # raise when the steps below change what the base holds
DEBOOTSTRAP_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Base:
    """The imported base image: its tag, how it was had (image, tarball or debootstrap), seconds spent."""

    tag: str
    source: str
    seconds: float


def recipe(mirror: str = MIRROR) -> str:
    """A short digest of everything that decides the base's contents."""
    text = "\n".join((RECIPE_VERSION, SUITE, "minbase", mirror, SECURITY, DPKG_EXCLUDES, APT_CLEAN))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sources(mirror: str) -> str:
    """apt sources of the base: the release, its updates and its security updates."""
    return (f"deb {mirror} {SUITE} main\ndeb {mirror} {SUITE}-updates main\n"
            f"deb {SECURITY} {SUITE}-security main\n")


def debootstrap(rootfs: Path, mirror: str, log: Path) -> None:
    """A minbase bookworm root filesystem in `rootfs` (its output to `log`)."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (`make image-tools` installs it)")
    if os.geteuid() != 0:
        raise RuntimeError("making the base needs root (debootstrap; podman runs rootful here)")
    with log.open("w") as out:
        done = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], stdout=out,
                              stderr=subprocess.STDOUT, timeout=DEBOOTSTRAP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"debootstrap {SUITE} from {mirror} failed ({done.returncode}): "
                           f"{' | '.join(tail)}")


def _remove(path: Path) -> None:
    """Remove a file, link or folder tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def slim(rootfs: Path, mirror: str) -> None:
    """Leave out what Debian's slim images leave out, and say so for later installs."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(DPKG_EXCLUDES)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
    (rootfs / "etc/apt/sources.list").write_text(sources(mirror))
    for folder in ("usr/share/groff", "usr/share/info", "usr/share/linda", "usr/share/lintian",
                   "usr/share/locale", "usr/share/man", "var/lib/apt/lists", "var/cache/apt"):
        if (rootfs / folder).is_dir():
            for child in (rootfs / folder).iterdir():
                _remove(child)
    for debris in [*(rootfs / "var/cache/debconf").glob("*-old"), *(rootfs / "var/log").rglob("*")]:
        if debris.is_file():  # logs emptied, their folders kept
            debris.unlink() if debris.name.endswith("-old") else debris.write_bytes(b"")
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for doc in (rootfs / "usr/share/doc").iterdir():
        if doc.is_dir() and not doc.is_symlink():
            for item in doc.iterdir():
                if item.name != "copyright":
                    _remove(item)
    for name in ("etc/resolv.conf", "etc/hostname"):  # the container engine provides them
        (rootfs / name).unlink(missing_ok=True)
    (rootfs / "etc/machine-id").write_text("")


def make_tarball(cache: Path, mirror: str) -> Path:
    """The slimmed root filesystem as a tarball in `cache` (made by debootstrap unless already there)."""
    tarball = cache / f"{SUITE}-minbase-{recipe(mirror)}.tar"
    if tarball.is_file():
        return tarball
    cache.mkdir(parents=True, exist_ok=True)
    work = cache / f"{SUITE}-rootfs.tmp"
    if work.exists():
        shutil.rmtree(work)
    debootstrap(work, mirror, cache / "debootstrap.log")
    slim(work, mirror)
    partial = tarball.with_suffix(".tar.tmp")
    subprocess.run(["tar", "--numeric-owner", "--sort=name", "-C", str(work), "-cf", str(partial), "."],
                   check=True, timeout=600)
    partial.rename(tarball)
    shutil.rmtree(work)
    return tarball


def current(tag: str, mirror: str) -> bool:
    """Whether podman holds `tag` made by this recipe."""
    if podman("image", "exists", tag, check=False).returncode != 0:
        return False
    labels = inspect("image", tag).get("Labels") or {}
    return labels.get(LABEL) == recipe(mirror)


def ensure(cache: Path, mirror: str = MIRROR, tag: str = TAG) -> Base:
    """The base image in podman: kept when current, else imported from the cached tarball, else made."""
    start = time.monotonic()
    if current(tag, mirror):
        return Base(tag, "image", time.monotonic() - start)
    made = not (cache / f"{SUITE}-minbase-{recipe(mirror)}.tar").is_file()
    tarball = make_tarball(cache, mirror)
    try:
        podman("import", "--change", f"LABEL {LABEL}={recipe(mirror)}", "--change", 'CMD ["/bin/bash"]',
               "--message", f"debian {SUITE} minbase", str(tarball), tag, timeout=600)
    except PodmanError:
        tarball.unlink(missing_ok=True)  # a damaged tarball is made again next time
        raise
    return Base(tag, "debootstrap" if made else "tarball", time.monotonic() - start)
