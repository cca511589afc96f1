"""The install users do, checked: `python -m build`, then the wheel with its `train` extra into a fresh venv.

Run by `make test-wheel` (part of `make test`). Steps, each timed:
1. build the sdist and, from it, the wheel (isolated build: npm install and the production front-end build);
2. a fresh venv (the same base Python), the wheel with its `train` extra plus JupyterLab and a kernel, installed
   with no node/npm on PATH (a prebuilt extension needs none): the dependencies through uv, the wheel itself
   through pip, then `pip check`;
3. `jupyter labextension list`: the extension is prebuilt (installed by the wheel) and enabled;
   `jupyter server extension list`: the server extension is enabled and loads;
4. a real kernel: `%load_ext jupyter_cleverthis`, `%train --help`, the packages come from that venv's site-packages;
5. the managed local cluster started from that venv, a tiny Llama LoRA job through `cleverthis-train --wait`
   with the runtime the wheel shipped, then `cleverthis-train setup tensorflow` and a tiny TensorFlow job that finds
   the environment under $CLEVERTHIS_HOME by itself; the cluster is stopped by its pid at the end.

`--phase prepare` does steps 1-2 only (with any Python: it needs no venv of the project's), `--phase check` the
rest on what prepare left. `make test` runs prepare beside the dev install.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".cache" / "wheel"
NODE_TOOLS = {"node", "nodejs", "npm", "npx", "corepack", "yarn", "yarnpkg", "jlpm"}


def step(what: str):
    class _Step:
        def __enter__(self):
            self.t0 = time.time()
            print(f"-- {what}", flush=True)

        def __exit__(self, *exc):
            print(f"   ({time.time() - self.t0:.0f} s)", flush=True)

    return _Step()


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 900, check: bool = True,
        cwd: Path | None = None) -> str:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    out = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)  # jupyter's lists are coloured
    if check and p.returncode != 0:
        raise SystemExit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{out[-6000:]}")
    return out


def path_without_node(bin_dir: Path) -> str:
    """A PATH with the system's tools but no node/npm: symlinks to every other program on the current PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d) or "/.venv" in d:
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            if name in NODE_TOOLS or (bin_dir / name).exists() or not os.access(target, os.X_OK):
                continue
            (bin_dir / name).symlink_to(target)
    return str(bin_dir)


def version() -> str:
    return json.loads((ROOT / "js" / "package.json").read_text())["version"]


def source_copy(dst: Path) -> Path:
    """The tree as git sees it (tracked files and untracked ones not ignored), copied: the build runs its npm steps
    there, never in the checkout, so it can run while `make install` builds the checkout's own front-end."""
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


def tools() -> Path:
    """A small venv with `build` and `uv` (the prepare phase runs before .venv exists)."""
    tools = WORK / "tools"
    run([sys.executable, "-m", "venv", str(tools)])
    run([str(tools / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "build", "uv"])
    return tools / "bin"


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a user of the wheel's venv: no other venv, no configured TF python, no node on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "CLEVERTHIS_TF_PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{path_without_node(WORK / 'bin')}"
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None
    return env


def prepare(constraints: str) -> None:
    """Steps 1-2: the sdist and the wheel, then a fresh venv with the wheel and its `train` extra."""
    dist, venv = WORK / "dist", WORK / "venv"
    shutil.rmtree(WORK, ignore_errors=True)
    with step("build the sdist and the wheel (python -m build, from a copy of the tree)"):
        src = source_copy(WORK / "src")
        bin_dir = tools()
        run([str(bin_dir / "python"), "-m", "build", "--outdir", str(dist), str(src)])
    wheel = next(dist.glob("*.whl"))
    base_python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    env = user_env(venv)
    python = str(venv / "bin" / "python")
    with step("a fresh venv: '<wheel>[train]' jupyterlab ipykernel nbclient, the wheel by pip (no node on PATH)"):
        run([base_python, "-m", "venv", str(venv)])
        # The dependencies the wheel's metadata asks for (its train extra) come through uv from the same sources
        # and constraints, byte-compiled on both cores (~50 s; pip took ~120 s of one core). Then pip installs the
        # wheel itself over it, as users do: its files, the data files under share/ and etc/, its entry points.
        links = [a for path in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", path)]
        run([str(bin_dir / "uv"), "pip", "install", "-q", "--python", python, "--compile-bytecode",
             "-c", constraints, *links,
             f"{wheel}[train]", "jupyterlab", "ipykernel", "nbclient"], env=env, cwd=WORK, timeout=1800)
        run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--force-reinstall",
             str(wheel)], env=env, cwd=WORK, timeout=600)
        run([python, "-m", "pip", "check"], env=env, cwd=WORK)  # every requirement met, as pip reads them
    (WORK / "prepared").write_text(wheel.name)


def check_artifacts(dist: Path) -> Path:
    """The wheel and the sdist carry the version, the front-end, the server config and the runtime."""
    wheel = next(dist.glob("*.whl"))
    sdist = next(dist.glob("*.tar.gz"))
    assert wheel.name.startswith(f"jupyter_cleverthis-{version()}-"), wheel.name
    assert sdist.name == f"jupyter_cleverthis-{version()}.tar.gz", sdist.name
    names = run([sys.executable, "-m", "zipfile", "-l", str(wheel)])
    for must in ("share/jupyter/labextensions/jupyter-cleverthis/package.json",
                 "share/jupyter/labextensions/jupyter-cleverthis/install.json",
                 "etc/jupyter/jupyter_server_config.d/jupyter_cleverthis.json",
                 "jupyter_cleverthis/widgets/static/widget.js", "jupyter_cleverthis/requirements-tf.txt",
                 "cleverthis_runtime/__main__.py", "cleverthis_runtime/_version.py"):
        assert must in names, f"the wheel lacks {must}"
    meta = run([sys.executable, "-c", "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
                "print(next(z.read(n).decode() for n in z.namelist() if n.endswith('.dist-info/METADATA')))",
                str(wheel)])
    assert "Classifier: Framework :: Jupyter :: JupyterLab :: Extensions :: Prebuilt" in meta
    assert f"Version: {version()}" in meta
    assert not re.search(r"Requires-Dist: torch==", meta), "exact pins belong in constraints.txt"
    return wheel


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--constraints", default=str(ROOT / "constraints.txt"))
    ap.add_argument("--tf-env", default=None, help="the TensorFlow environment `make install-tf` built")
    ap.add_argument("--keep", action="store_true", help="keep the venv and the built files")
    ap.add_argument("--phase", choices=("all", "prepare", "check"), default="all",
                    help="prepare: build and install only (make test runs it beside the dev install); "
                         "check: the rest, on what prepare left")
    a = ap.parse_args()
    a.constraints = os.path.abspath(a.constraints)
    t0 = time.time()
    if a.phase in ("all", "prepare"):
        prepare(a.constraints)
        if a.phase == "prepare":
            print(f"wheel prepared in {time.time() - t0:.0f} s")
            return 0
    if not (WORK / "prepared").is_file():
        raise SystemExit("no prepared wheel venv: run `tests/wheel/check.py --phase prepare` first")
    dist, venv = WORK / "dist", WORK / "venv"
    shutil.rmtree(WORK / "runtime-only", ignore_errors=True)
    wheel = check_artifacts(dist)
    env = user_env(venv)

    py = str(venv / "bin" / "python")
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env).strip()
    with step("jupyter labextension list / jupyter server extension list"):
        labs = run([str(venv / "bin" / "jupyter"), "labextension", "list"], env=env, cwd=WORK)
        assert re.search(rf"jupyter-cleverthis v{re.escape(version())}\s+enabled\s+\S*OK\S*\s+\(python, jupyter-cleverthis\)",
                         labs), labs
        installed = venv / "share" / "jupyter" / "labextensions" / "jupyter-cleverthis"
        assert (installed / "package.json").is_file() and not installed.is_symlink(), "not a prebuilt install"
        servers = run([str(venv / "bin" / "jupyter"), "server", "extension", "list"], env=env, cwd=WORK)
        assert re.search(r"jupyter_cleverthis\s+\S*enabled", servers), servers
        assert re.search(r"jupyter_cleverthis\s+\S*\s*\S*OK", servers), servers

    home = Path(os.environ.get("CLEVERTHIS_WHEEL_HOME", Path.home() / ".cache" / "cleverthis" / "home"))
    for stale in ("clusters", "events.sqlite", "models", "datasets"):
        shutil.rmtree(home / stale, ignore_errors=True) if (home / stale).is_dir() else (home / stale).unlink(missing_ok=True)
    env.update(CLEVERTHIS_HOME=str(home), HF_HUB_OFFLINE="1")
    env.pop("RAY_ADDRESS", None)

    with step("a real kernel: %load_ext jupyter_cleverthis"):
        code = (
            "import nbformat\nfrom nbclient import NotebookClient\n"
            "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [\n"
            "  '%load_ext jupyter_cleverthis',\n"
            "  'import jupyter_cleverthis, cleverthis_runtime; print(\"FILES\", jupyter_cleverthis.__file__, "
            "cleverthis_runtime.__file__, jupyter_cleverthis.__version__)',\n"
            "  '%train --help']])\n"
            "NotebookClient(nb, timeout=120, kernel_name='python3').execute()\n"
            "print('\\n'.join(o.get('text', '') for c in nb.cells for o in c.outputs))\n"
        )
        out = run([py, "-c", code], env=env, cwd=WORK)
        files = out.split("FILES ", 1)[1].split()
        assert files[0].startswith(site) and files[1].startswith(site), (files, site)
        assert files[2] == version(), files
        assert "usage: %train" in out, out

    cli = str(venv / "bin" / "cleverthis-train")
    data = home / "datasets" / "training"
    shutil.copytree(ROOT / "examples" / "data", data, ignore=shutil.ignore_patterns("checkpoints"))
    try:
        with step("cleverthis-train cluster up (from the wheel's venv)"):
            print(run([cli, "cluster", "up"], env=env, cwd=WORK).strip()[-300:])
        with step("a tiny Llama LoRA job with the runtime shipped in the wheel"):
            model = str(home / "models" / "tiny-llama")
            run([py, "-m", "cleverthis_runtime.tiny", model, str(data)], env=env, cwd=WORK)
            shipped = run([py, "-c", "from jupyter_cleverthis.service.jobs import JobService; "
                           "from jupyter_cleverthis.spec import JobSpec; "
                           "print(JobService._runtime_env(None, JobSpec(name='x'))['py_modules'][0])"], env=env).strip()
            assert shipped == os.path.join(site, "cleverthis_runtime"), shipped
            out = run([cli, "--name", "wheel-torch", "--model", model, "--dataset", str(data), "--epochs", "1",
                       "--batch-size", "16", "--workers", "1", "--wait"], env=env, cwd=WORK)
            assert "[wheel-torch] succeeded" in out and "checkpoint epoch-1" in out, out[-3000:]
        with step("cleverthis-train setup tensorflow, then a tiny TensorFlow job"):
            tf_dir = home / "envs" / "tensorflow"
            if a.tf_env and Path(a.tf_env).resolve() != tf_dir.resolve():
                raise SystemExit(f"--tf-env {a.tf_env} should be {tf_dir} (the same environment, built once)")
            print(run([cli, "setup", "tensorflow"], env=env, cwd=WORK).strip())
            tf_py = tf_dir / "bin" / "python"
            only_runtime = WORK / "runtime-only"
            only_runtime.mkdir()
            (only_runtime / "cleverthis_runtime").symlink_to(os.path.join(site, "cleverthis_runtime"))
            tf_model = home / "models" / "tiny-tf"
            run([str(tf_py), "-c", "import sys; from cleverthis_runtime.tf_tiny import build_tf_tiny_model as b; "
                 "b(sys.argv[1], [sys.argv[2]])", str(tf_model), str(data)],
                env={**env, "PYTHONPATH": str(only_runtime), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
            out = run([cli, "--name", "wheel-tf", "--framework", "tensorflow", "--model", str(tf_model),
                       "--dataset", str(data), "--output-dir", str(home / "datasets" / "tf-checkpoints"),
                       "--epochs", "1", "--batch-size", "16", "--workers", "1",
                       "--config", json.dumps({"method": "full", "max_seq_length": 128}), "--wait"], env=env, cwd=WORK)
            assert "[wheel-tf] succeeded" in out and "checkpoint epoch-1" in out, out[-3000:]
    finally:
        print(run([cli, "cluster", "down"], env=env, cwd=WORK, check=False).strip())
    if not a.keep:
        shutil.rmtree(venv, ignore_errors=True)
    print(f"wheel check passed in {time.time() - t0:.0f} s: {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
