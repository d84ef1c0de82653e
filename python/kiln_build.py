"""kiln_build: the PEP 517 build backend of the kiln package (python/pyproject.toml names it).

A backend of our own, not setuptools, because `pip install ./python` must work where nothing can be
downloaded (the GPU machines reach no index, and pip's isolated build would fetch setuptools there): it
needs only the standard library. A wheel holds kiln/ as it is and, when the checkout has built it
(`make`), ../build/libkiln_rt.so with the shared objects its rpath ($ORIGIN/lib) expects, in kiln/lib/; the
wheel is then tagged for this platform. An editable install (`pip install -e ./python`) is a .pth file
that points at this folder, so the package stays the checkout's and finds build/ there.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.normpath(os.path.join(HERE, "..", "build"))
RUNTIME = "libkiln_rt.so"
RUNTIME_NEEDS = ("libcjson.so*",)  # what libkiln_rt.so links besides libc (the Makefile's CORE_LDLIBS)


def _project() -> dict:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    with open(os.path.join(HERE, "kiln", "__init__.py")) as f:
        project["version"] = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    return project


def _metadata(project: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}", f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    return "\n".join(lines) + "\n"


def _package_files() -> list:
    """[(path in the wheel, path on disk)]: kiln/ and, when built, the runtime."""
    files = []
    for path in sorted(glob.glob(os.path.join(HERE, "kiln", "*"))):
        if path.endswith((".py", ".cpp")):
            files.append((f"kiln/{os.path.basename(path)}", path))
    runtime = os.path.join(BUILD, RUNTIME)
    if os.path.exists(runtime):
        files.append((f"kiln/{RUNTIME}", runtime))
        for pattern in RUNTIME_NEEDS:
            for lib in sorted(glob.glob(os.path.join(BUILD, "lib", pattern))):
                files.append((f"kiln/lib/{os.path.basename(lib)}", lib))
    return files


def _tag(files: list) -> str:
    if any(name.endswith(".so") or ".so." in name for name, _ in files):
        return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-any"


def _dist_info(project: dict, tag: str) -> dict:
    name = f"{project['name']}-{project['version']}.dist-info"
    return {f"{name}/METADATA": _metadata(project),
            f"{name}/WHEEL": f"Wheel-Version: 1.0\nGenerator: kiln_build\nRoot-Is-Purelib: "
                             f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n"}


def _write_wheel(wheel_directory: str, entries: list, project: dict, tag: str) -> str:
    """entries: [(path in the wheel, bytes)]; adds the dist-info and its RECORD."""
    entries = entries + [(k, v.encode()) for k, v in _dist_info(project, tag).items()]
    record_name = f"{project['name']}-{project['version']}.dist-info/RECORD"
    record = []
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{record_name},,")
    entries.append((record_name, ("\n".join(record) + "\n").encode()))
    wheel_name = f"{project['name']}-{project['version']}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") or ".so." in name else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel_name


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 / PEP 660 hooks ------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    for name, text in _dist_info(project, _tag(_package_files())).items():
        path = os.path.join(metadata_directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return f"{project['name']}-{project['version']}.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _package_files()
    return _write_wheel(wheel_directory, [(name, _read(path)) for name, path in files], _project(), _tag(files))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    return _write_wheel(wheel_directory, [(f"__editable__.{project['name']}.pth", (HERE + "\n").encode())],
                        project, "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{project['name']}-{project['version']}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "kiln_build.py"] + [n for n, _ in _package_files()
                                                          if not n.endswith(".so") and ".so." not in n]:
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata(project).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
