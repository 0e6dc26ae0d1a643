"""A real notebook front end driven by a real browser, for tests/test_browser_widgets.py.

JupyterLab (from PyPI, pinned in requirements-cpu.txt) is started on a free local port with a throwaway token and
throwaway config/settings/workspace folders, so nothing of the user's Jupyter setup is read or changed. Chromium is
the system one (Debian package `chromium`; scripts/setup-cpu.sh installs it with apt when it is missing), driven
by Playwright with `executable_path`: Playwright's own browser downloads are never used.

The lessons are opened as they are in notebooks/ (or notebooks/student/), with CI's tiny parameters injected after
the parameters cell by papermill without executing anything; the copy lives in test-artifacts/browser/ inside
the kit (gitignored) so that its setup cell finds the kit's folder exactly as a student's notebook does. The
whole notebook is run with JupyterLab's own "Run All Cells" command, and widgets are found by what they are in
the page (ipywidgets' CSS classes and the texts the helpers produce), never by cell index.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = os.environ.get("GRPO_KIT_CHROMIUM", "/usr/bin/chromium")
# Flags that keep a headless Chromium quiet and offline: without the background-networking ones its own
# connections (updates, sync, field trials) get refused many at a time on a machine that reaches only registries.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
MISSING_SETUP = "run `bash scripts/setup-cpu.sh` (it installs JupyterLab, Playwright and, with apt, chromium)"

# Front-end settings for a predictable page: every cell kept in the DOM (JupyterLab 4 otherwise virtualises long
# notebooks, so a widget far down would not exist until scrolled to), no news or update checks (no internet).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


def require_browser_stack() -> None:
    """Fail (not skip) with the fix when a prerequisite is missing: CI must never pass by not looking."""
    missing = []
    for module in ("jupyterlab", "playwright", "papermill"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"the Python package {module}")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"Chromium at {CHROMIUM} (Debian: apt-get install chromium; or set GRPO_KIT_CHROMIUM)")
    if missing:
        raise AssertionError("the browser test needs " + ", ".join(missing) + f": {MISSING_SETUP}")


def parameterised_copy(source: Path, parameters: dict, name: str) -> Path:
    """source with `parameters` injected after its parameters cell (papermill, nothing executed), saved in ARTIFACTS."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(source))
    nb = parameterize_notebook(nb, parameters, kernel_name="python3", language="python")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / name
    nbformat.write(nb, target)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """`with JupyterLab(tmp) as lab:` a JupyterLab server serving the kit's folder; lab.url(path) opens a file."""

    def __init__(self, workdir: Path, startup_timeout_s: float = 120.0):
        self.workdir, self.startup_timeout_s = Path(workdir), startup_timeout_s
        self.port, self.token = _free_port(), uuid.uuid4().hex
        self.proc = None
        self.log_path = ARTIFACTS / "jupyterlab.log"

    def __enter__(self):
        settings = self.workdir / "lab-settings"
        for rel, values in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline plots, as students get
        env.update({"JUPYTER_CONFIG_DIR": str(self.workdir / "config"), "JUPYTER_DATA_DIR": str(self.workdir / "data"),
                    "JUPYTER_RUNTIME_DIR": str(self.workdir / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
                    "JUPYTERLAB_WORKSPACES_DIR": str(self.workdir / "workspaces")})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={ROOT}",
             "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run "Run All Cells" as the menu does
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
             "--ServerApp.allow_root=True"],  # CI runs as root
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + self.startup_timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"JupyterLab exited at start (code {self.proc.returncode}); see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=5):
                    return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise AssertionError(f"JupyterLab did not answer within {self.startup_timeout_s:.0f} s; see {self.log_path}")

    def url(self, path: Path) -> str:
        rel = Path(path).resolve().relative_to(ROOT).as_posix()
        return f"http://127.0.0.1:{self.port}/lab/tree/{rel}?token={self.token}&reset"

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # the server shuts its kernels down on SIGTERM
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return False


def clean_artifacts() -> None:
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)


# ------------------------------------------------------------------------------------------ page helpers (JS)

# The open notebook's run state, read from the page: what a student sees in the prompts ("[*]:" while queued or
# running), the kernel status, and every error output (its text) so far.
NOTEBOOK_STATE_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext) return {ready: false};
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const prompts = [...panel.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  const errors = [];
  for (const cell of panel.content.widgets) {
    const outputs = cell.model.outputs;
    if (!outputs) continue;
    for (let i = 0; i < outputs.length; i++) {
      const out = outputs.get(i).toJSON();
      if (out.output_type === 'error') errors.push(out.ename + ': ' + out.evalue);
    }
  }
  return {ready: true, kernel: kernel ? kernel.status : null, prompts, errors,
          runAll: window.__grpoRunAll === undefined ? null : String(window.__grpoRunAll)};
}"""

RUN_ALL_JS = """async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  window.__grpoRunAll = undefined;
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
      ok => { window.__grpoRunAll = ok; }, err => { window.__grpoRunAll = 'error: ' + err; });
}"""


def open_notebook(page, lab: JupyterLab, path: Path, timeout_s: float = 180.0) -> None:
    """Open the notebook and wait until its kernel has started (idle)."""
    page.goto(lab.url(path))
    page.wait_for_function("""() => { const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        return p && p.sessionContext && p.sessionContext.session && p.sessionContext.session.kernel
               && p.sessionContext.session.kernel.status === 'idle'; }""", timeout=timeout_s * 1000)


def run_all(page, timeout_s: float, on_poll=None, poll_s: float = 0.25) -> dict:
    """JupyterLab's Run All Cells; returns the final state once the run finished (or stopped at an error).

    on_poll(page) is called every poll_s while cells run (e.g. to watch the dashboard redraw)."""
    page.evaluate(RUN_ALL_JS)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if on_poll is not None:
            on_poll(page)
        state = page.evaluate(NOTEBOOK_STATE_JS)
        if state.get("runAll") is not None and state["kernel"] == "idle" and not any("*" in p for p in state["prompts"]):
            return state
        time.sleep(poll_s)
    raise AssertionError(f"Run All did not finish within {timeout_s:.0f} s: {page.evaluate(NOTEBOOK_STATE_JS)}")


# Texts that mean a widget did not render as a widget: the front end's own error, a widget stuck loading, or the
# plain-text repr a front end without the widget manager shows instead.
WIDGET_FAILURE_TEXTS = ("Error displaying widget", "Error rendering widget", "Loading widget...",
                        "Failed to load model class", "model not found")
WIDGET_REPR_PREFIXES = ("VBox(", "HBox(", "Textarea(", "FloatSlider(", "HTML(value=", "IntProgress(", "Output(")


def widget_failures(page) -> list[str]:
    """Every sign in the page that a widget failed to render (empty when all is well)."""
    texts = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText)""")
    found = [t[:300] for t in texts if any(s in t for s in WIDGET_FAILURE_TEXTS)]
    found += [t[:300] for t in texts if t.strip().startswith(WIDGET_REPR_PREFIXES)]
    return found
