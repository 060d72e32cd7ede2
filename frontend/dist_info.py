"""Writes ``trnsim-<version>.dist-info`` next to the built package (``<build>/python``), so that
importlib.metadata finds trnsim's entry points (``torch.backends`` autoload, the dynamo backend
``"neuron"``) in the development build, which the venv's ``trnsim-build.pth`` puts on sys.path.

Name, version (with the local label ``+build``) and entry points come from pyproject.toml, the same
declaration the wheel is built from. RECORD lists only the dist-info's own files, so nothing that
removes this "installation" can touch the build folder's package (pip leaves it alone anyway: it
lies outside the venv).

Usage: python dist_info.py PYPROJECT_TOML OUTPUT_DIR
"""
import pathlib
import shutil
import sys
import tomllib


def entry_points_text(project):
    lines = []
    for group, entries in sorted(project.get("entry-points", {}).items()):
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in sorted(entries.items())]
        lines.append("")
    return "\n".join(lines)


def write(pyproject_path, out_dir):
    project = tomllib.loads(pathlib.Path(pyproject_path).read_text())["project"]
    # The local label "+build" keeps pip from taking this build for the wheel of the same version:
    # `pip install .` into the venv whose .pth names this folder would otherwise say "already installed".
    name, version = project["name"], project["version"] + "+build"
    out_dir = pathlib.Path(out_dir)
    info = out_dir / f"{name}-{version}.dist-info"
    for stale in out_dir.glob(f"{name}-*.dist-info"):
        if stale != info:
            shutil.rmtree(stale)
    info.mkdir(parents=True, exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {project.get('description', '')}\n",
        "entry_points.txt": entry_points_text(project),
        "INSTALLER": "trnsim-cmake-build\n",
    }
    for file_name, text in files.items():
        path = info / file_name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    record = "".join(f"{info.name}/{file_name},,\n" for file_name in [*files, "RECORD"])
    (info / "RECORD").write_text(record)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("Usage: ", 1)[1])
    write(sys.argv[1], sys.argv[2])
