"""The Containerfile's images built and run with buildah, on a base made of Debian packages alone.

No image registry is reachable where `make test` runs, so the base the Containerfile starts from
(its `BASE` argument) is built here: mmdebstrap writes a minimal Debian root with python3, and
buildah imports it as an image. docs/decisions/0084 says why, and what each step costs.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO_ROOT, Service, require_tool, start_service, unavailable

SUITE = "bookworm"  # Debian 12: python3 is 3.11, the project's oldest (pyproject's requires-python)
BASE_TAG = "localhost/gpuhealth-base:debian-bookworm"

MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--include=python3,python3-venv,usr-is-merged",
    # usr-is-merged with the merged-/usr hook keeps usrmerge, and with it 50 MB of perl, out of the root.
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    # Documentation, manuals and translations: 50 MB no container reads (copyright files stay).
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
)

TRUST_STORE = Path("/etc/ssl/certs/ca-certificates.crt")
"""This machine's CA bundle. Where HTTPS goes through an inspecting proxy, its certificate is only
here, so the base carries the bundle and a pip.conf naming it: pip inside the build reaches PyPI as
pip on this machine does. It is a test base, never published."""
PIP_CONF = f"[global]\ncert = {TRUST_STORE}\n"

# overlay, not vfs: vfs copies the whole root for every layer, and the collector image took 2 min 52 s
# with it against 49 s with overlay (docs/decisions/0084). Root on this kernel mounts overlay itself.
STORAGE_DRIVER = "overlay"
COMMAND_TIMEOUT_S = 600.0
STORAGE_SIZE = "6g"  # the images, their stages and the base: 1.6 GB measured


def require_root_and_tools() -> tuple[str, str]:
    """(buildah, mmdebstrap) paths; skip locally (fail in CI) without them or without root."""
    if os.geteuid() != 0:
        unavailable("building images needs root (mmdebstrap, buildah's overlay storage)", "CI runs as root")
    return require_tool("buildah"), require_tool("mmdebstrap")


def run(cmd: Sequence[str], what: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """stdout of `cmd`; fail with the end of its output if it exits non-zero."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr)[-6000:]
        pytest.fail(f"{what}: exit {proc.returncode}\ncommand: {' '.join(cmd)}\n{out}", pytrace=False)
    return proc.stdout


@dataclass(frozen=True)
class Buildah:
    """buildah on a storage of its own (under the test's temporary folder), nothing shared with the machine's."""

    binary: str
    storage: Path

    def command(self, *args: str) -> list[str]:
        """A buildah command line on this storage."""
        return [
            self.binary, "--storage-driver", STORAGE_DRIVER,
            "--root", str(self.storage / "root"), "--runroot", str(self.storage / "run"),
            *args,
        ]  # fmt: skip

    def __call__(self, *args: str, what: str = "buildah") -> str:
        return run(self.command(*args), what).strip()

    def build_base(self, mmdebstrap: str, workdir: Path) -> str:
        """The Debian base image, from Debian's packages alone; its tag."""
        rootfs = self.storage / "rootfs.tar"
        run([mmdebstrap, *MMDEBSTRAP_OPTIONS, SUITE, str(rootfs)], "mmdebstrap")
        pip_conf = workdir / "pip.conf"
        pip_conf.write_text(PIP_CONF)
        ctr = self("from", "scratch")
        self("add", ctr, str(rootfs), "/")
        self("copy", ctr, str(TRUST_STORE), str(TRUST_STORE))
        self("copy", ctr, str(pip_conf), "/etc/pip.conf")
        self("commit", "--quiet", "--rm", ctr, BASE_TAG)
        rootfs.unlink()
        return BASE_TAG

    def build(self, target: str, tag: str, base: str) -> None:
        """Containerfile's `target` from the repository, as `tag`; --layers lets the second target
        reuse the stages the first built."""
        self(
            "build", "--isolation", "chroot", "--layers", "--build-arg", f"BASE={base}",
            "--target", target, "--tag", tag, "--file", "Containerfile", str(REPO_ROOT),
            what=f"building target {target}",
        )  # fmt: skip

    def config(self, image: str) -> dict[str, Any]:
        """The image's OCI config (User, Entrypoint, Cmd, Env, ...)."""
        config: dict[str, Any] = json.loads(self("inspect", "--type", "image", image))["OCIv1"]["config"]
        return config

    def size_mb(self, image: str) -> float:
        """The image's unpacked size as buildah reports it, in MB (10^6 bytes)."""
        for row in json.loads(self("images", "--json")):
            if image in (row.get("names") or []):
                number, unit = str(row["size"]).split()
                return float(number) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[unit]
        raise AssertionError(f"{image} is not in buildah's images")

    def exec(self, image: str, *argv: str) -> str:
        """stdout of `argv` in a fresh container of `image` (removed after)."""
        ctr = self("from", image)
        try:
            return self("run", "--isolation", "chroot", ctr, "--", *argv, what=f"{' '.join(argv)} in {image}")
        finally:
            self("rm", ctr)

    def start(self, image: str, args: Sequence[str], ready_path: str, port: int, log_dir: Path) -> Container:
        """`image` run as its entrypoint with `args` (not its CMD), serving on 127.0.0.1:`port`: the
        chroot isolation shares this machine's network. Waits for GET `ready_path` to answer 200."""
        entrypoint = self.config(image).get("Entrypoint") or []
        ctr = self("from", image)
        cmd = self.command("run", "--isolation", "chroot", ctr, "--", *entrypoint, *args)
        name = f"{image} {' '.join(args[:1])}"
        try:
            svc = start_service(name, cmd, f"http://127.0.0.1:{port}", ready_path, log_dir / f"{ctr}.log")
        except BaseException:
            self("rm", ctr)
            raise
        return Container(self, ctr, svc)

    def remove_everything(self) -> None:
        """Every container of this storage (their overlay mounts with them), then the storage itself."""
        try:
            run(self.command("rm", "--all"), "buildah rm --all")
        finally:
            if subprocess.run(["umount", str(self.storage)], check=False).returncode != 0:
                subprocess.run(["umount", "--lazy", str(self.storage)], check=False)  # busy: detach it now
            self.storage.rmdir()


def storage_in_memory(path: Path) -> Path:
    """`path`, a new tmpfs: the storage of the images. On this machine's disk, deleting it took 130 s
    (`buildah rmi --all` 53 s of it and more); unmounting takes under a second, and the layers are
    written faster (the base's import 7 s against 13 s). It holds about 1.6 GB at the end."""
    path.mkdir()
    run(["mount", "-t", "tmpfs", "-o", f"size={STORAGE_SIZE},mode=0700", "gpuhealth-images", str(path)], "mount")
    return path


@dataclass
class Container:
    """A container running one long-lived command, as a Service of the integration fixtures."""

    buildah: Buildah
    name: str
    service: Service

    def stop(self) -> None:
        """SIGTERM to buildah (it passes it on), then the container is removed."""
        self.service.stop()
        self.buildah("rm", self.name)
