"""The lessons' widgets and live plots as students see them: JupyterLab in a real headless Chromium.

Each test opens a lesson notebook (CI's tiny CPU parameters injected, see tests/notebook_browser.py), runs it
with the front end's "Run All Cells", then works the widgets with the mouse and keyboard and checks what the page
shows: the reward playground's scores follow an edited completion (04), an advantage slider changes the advantages
table (04), and the training dashboard is one figure redrawn in place that ends at the last step (05). It fails on
any widget error shown in the page and on any error in the browser console. Screenshots of each go to
test-artifacts/browser/ (gitignored), kept after the run.

Marked `browser` (and `slow`): part of the README's test command and of CI; `pytest -m "not browser"` skips it
for a quick local run. Needs JupyterLab and Playwright (requirements-cpu.txt) and the system Chromium
(scripts/setup-cpu.sh installs it with apt when missing); a missing piece fails the test with the fix.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import notebook_browser as nbb
from test_notebooks import COURSE, TINY  # CI's smallest CPU settings and the class plan's runs, one home
from helpers.teaching.grpo_math import group_advantages
from helpers.rewards import score_completion

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = nbb.ROOT
REWARDS_LESSON = "04_rewards.ipynb"
TRAINING_LESSON = "05_train.ipynb"
# 05 as CI's class run has it (class_plans' CPU values: 2 steps, and its rerun exercise at RERUN_STEPS, not the 12
# steps a class reruns: 140 s more on the 2-core machine)
TRAINING_PARAMETERS = next(parameters for name, parameters in COURSE if name == TRAINING_LESSON.removesuffix(".ipynb"))

# The reward playground (helpers.teaching.reward_lab.playground): a VBox holding the completion Textarea and the scores HTML.
PLAYGROUND = ".widget-vbox:has(> .widget-textarea):has(> .widget-html)"
# The advantage sliders (helpers.teaching.grpo_math.AdvantageWidget): a VBox of rows "slider + label", then the table.
ADVANTAGES = ".widget-vbox:has(> .widget-hbox .widget-hslider):has(> .widget-html)"
# The training dashboard (helpers.run.dashboard.TrainingDashboard in a notebook): status line, figure, samples.
DASHBOARD_STATUS = ".grpo-dashboard-status"

WRONG_FORMATTED = "<reasoning>3 + 4 = 7</reasoning>\n<answer>7</answer>"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    nbb.require_browser_stack()
    nbb.clean_artifacts()
    with nbb.JupyterLab(tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=nbb.CHROMIUM, headless=True, args=nbb.CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Console:
    """Errors the page reports: console.error messages and uncaught exceptions."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text} ({m.location.get('url')})")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 2000})  # tall: the dashboard fits in one shot
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    pg.console = Console(pg)
    yield pg
    context.close()


def _shot(locator, name: str) -> Path:
    path = nbb.ARTIFACTS / name
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path))
    assert path.stat().st_size > 0
    return path


# The only console errors let through: an image from the internet that this offline machine cannot fetch (the
# notebooks' Open-in-Colab badge). Anything served by the local JupyterLab, and every script error, still fails.
OFFLINE_ONLY = re.compile(r"^console\.error: Failed to load resource: net::ERR_NAME_NOT_RESOLVED \(https://(?!127\.0\.0\.1)")


def _assert_clean(page) -> None:
    failures = nbb.widget_failures(page)
    assert not failures, f"widgets failed to render: {failures}"
    errors = [e for e in page.console.errors if not OFFLINE_ONLY.match(e)]
    assert not errors, f"errors in the browser console: {errors}"


def _scores(playground) -> dict[str, float]:
    """The playground's scores table as the page shows it: {row name: value}."""
    rows = {}
    for line in playground.locator(".widget-html").inner_text().splitlines():
        m = re.match(r"\s*(\S+)\s+(-?\d+\.\d+)", line)
        if m:
            rows[m.group(1)] = float(m.group(2))
    return rows


def _run_lesson(page, lab, source: Path, name: str, run_dir: Path, timeout_s: float, on_poll=None,
                parameters: dict = TINY) -> dict:
    copy = nbb.parameterised_copy(source, {**parameters, "RUN_DIR": str(run_dir)}, name)  # never the kit's runs/course
    nbb.open_notebook(page, lab, copy)
    return nbb.run_all(page, timeout_s, on_poll=on_poll)


def _with_total(scores: dict[str, float]) -> dict[str, float]:
    return {**scores, "total": sum(scores.values())}


def _check_playground(page, prefix: str) -> None:
    playground = page.locator(PLAYGROUND)
    assert playground.count() == 1, (f"one reward playground expected, found {playground.count()} (did Run All stop "
                                     f"before it? errors: {page.evaluate(nbb.NOTEBOOK_STATE_JS)['errors']})")
    textarea = playground.locator(".widget-textarea textarea")
    gold = playground.locator(".widget-text input").input_value()
    before = _scores(playground)
    assert before == pytest.approx(_with_total(score_completion(textarea.input_value(), gold))), \
        "the page shows the kit's scores for the lesson's completion"
    _shot(playground, f"{prefix}playground-before.png")
    expected = _with_total(score_completion(WRONG_FORMATTED, gold))
    assert expected["total"] != before["total"], "the test's edit must change the total"
    textarea.click()
    textarea.press("Control+a")
    textarea.press_sequentially(WRONG_FORMATTED, delay=5)  # keystrokes, as a student types
    # The scores are computed in the kernel (the Textarea's observer, on every keystroke) and sent back: wait until
    # the page shows the scores of the whole edited text.
    after, deadline = _scores(playground), time.time() + 30
    while after != pytest.approx(expected) and time.time() < deadline:
        time.sleep(0.2)
        after = _scores(playground)
    _shot(playground, f"{prefix}playground-after-edit.png")
    assert textarea.input_value() == WRONG_FORMATTED
    assert after == pytest.approx(expected), "the page shows the kernel's scores for the edited completion"


def _advantages_shown(widget) -> tuple[list[float], list[float], list[float]]:
    """(slider readouts, rewards column, advantages column) as the page shows them."""
    readouts = [float(r) for r in widget.locator(".widget-hslider .widget-readout").all_inner_texts()]
    rows = [re.search(r"\s(-?\d+\.\d+)\s+([+-]\d+\.\d+)\s+(pushed UP|pushed down|unchanged)$", line)
            for line in widget.locator(".widget-html pre").inner_text().splitlines()]
    rows = [m for m in rows if m]
    return readouts, [float(m.group(1)) for m in rows], [float(m.group(2)) for m in rows]


def _check_advantage_slider(page, prefix: str) -> None:
    widget = page.locator(ADVANTAGES)
    assert widget.count() == 1, (f"one advantage widget expected, found {widget.count()} (did Run All stop before "
                                 f"it? errors: {page.evaluate(nbb.NOTEBOOK_STATE_JS)['errors']})")
    sliders = widget.locator(".widget-hslider")
    assert sliders.count() >= 2, "one slider per completion of the example group"
    readouts, rewards, advantages = _advantages_shown(widget)
    assert readouts == rewards and len(rewards) == sliders.count(), "one table row per slider, same rewards"
    assert advantages == pytest.approx(group_advantages(rewards), abs=1e-3), "TRL's advantages for the rewards shown"
    _shot(widget, f"{prefix}advantages-before.png")
    table_before = widget.locator(".widget-html pre").inner_text()
    # Drag the first completion's slider with the mouse to the end of its track farther from the handle; the
    # slider sends its value on release, the kernel recomputes the table.
    handle = sliders.first.locator(".noUi-handle")
    track = sliders.first.locator(".noUi-target")
    handle.scroll_into_view_if_needed()
    hb, tb = handle.bounding_box(), track.bounding_box()
    x, y = hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2
    target = tb["x"] - 20 if x > tb["x"] + tb["width"] / 2 else tb["x"] + tb["width"] + 20
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(target, y, steps=10)
    page.mouse.up()
    try:
        page.wait_for_function(
            """([sel, old]) => { const p = document.querySelector(sel + ' > .widget-html pre'); return p && p.innerText !== old; }""",
            arg=[ADVANTAGES, table_before], timeout=30_000)
    finally:
        _shot(widget, f"{prefix}advantages-after-slide.png")
    new_readouts, new_rewards, new_advantages = _advantages_shown(widget)
    assert new_readouts[0] != readouts[0] and new_readouts[1:] == readouts[1:], f"only the first slider moved: {new_readouts}"
    assert new_rewards == new_readouts, "the table shows the slider values (computed in the kernel)"
    assert new_advantages == pytest.approx(group_advantages(new_rewards), abs=1e-3)
    assert new_advantages != pytest.approx(advantages, abs=1e-3), "the advantages changed"


@pytest.mark.parametrize("source", [ROOT / "notebooks" / REWARDS_LESSON, ROOT / "notebooks" / "student" / REWARDS_LESSON],
                         ids=["instructor", "student"])
def test_rewards_lesson_widgets_respond(page, lab, source, tmp_path):
    student = "student" in source.parts
    prefix = "04-student-" if student else "04-"
    start = time.time()
    state = _run_lesson(page, lab, source, f"{prefix}{REWARDS_LESSON}", tmp_path / "run", timeout_s=600)
    # Both copies run to the end: the student copy's unanswered exercises say "not answered yet" instead of raising.
    assert not state["errors"], f"the lesson raised: {state['errors']}"
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in state["prompts"]), f"every cell ran: {state['prompts']}"
    _check_playground(page, prefix)
    _check_advantage_slider(page, prefix)
    page.screenshot(path=str(nbb.ARTIFACTS / f"{prefix}page.png"), full_page=False)
    _assert_clean(page)
    print(f"{source.relative_to(ROOT)}: opened, run and worked in the browser in {time.time() - start:.0f} s")


# The dashboard as the page shows it: how many status blocks and figures its cell holds, the figure's identity
# (its image data changes on every redraw) and the status line.
DASHBOARD_JS = """sel => {
  const status = [...document.querySelectorAll(sel)];
  if (!status.length) return {status: 0};
  const cell = status[0].closest('.jp-Cell');
  const images = [...cell.querySelectorAll('.jp-OutputArea-output img')];
  return {status: status.length, statusInCell: cell.querySelectorAll(sel).length, images: images.length,
          src: images.length ? images[0].src.length + ':' + images[0].src.slice(-80) : null,
          text: status[0].innerText.trim(), cellPrompt: cell.querySelector('.jp-InputPrompt').textContent.trim(),
          samples: cell.querySelectorAll('.grpo-dashboard-samples').length};
}"""


class DashboardWatch:
    """Polled while the lesson runs: every distinct state of the dashboard the page showed."""

    def __init__(self):
        self.seen: list[dict] = []
        self.shot = False

    def __call__(self, page):
        state = page.evaluate(DASHBOARD_JS, DASHBOARD_STATUS)
        if state["status"] and (not self.seen or state != self.seen[-1]):
            self.seen.append(state)
            if not self.shot and state["images"]:
                cell = page.locator(".jp-Cell", has=page.locator(DASHBOARD_STATUS))
                _shot(cell.locator(".jp-Cell-outputWrapper"), "05-dashboard-during-training.png")
                self.shot = True


def test_training_dashboard_redraws_in_place(page, lab, tmp_path):
    start = time.time()
    watch = DashboardWatch()
    state = _run_lesson(page, lab, ROOT / "notebooks" / TRAINING_LESSON, f"05-{TRAINING_LESSON}", tmp_path / "run",
                        timeout_s=900, on_poll=watch, parameters=TRAINING_PARAMETERS)
    assert not state["errors"], f"the lesson raised: {state['errors']}"
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in state["prompts"]), f"every cell ran: {state['prompts']}"
    final = page.evaluate(DASHBOARD_JS, DASHBOARD_STATUS)
    watch.seen.append(final)
    steps = TRAINING_PARAMETERS["MAX_STEPS"]
    # One dashboard, one figure, at every moment the page was looked at: redrawn in place, never stacked.
    stacked = [s for s in watch.seen if s["status"] != 1 or s["statusInCell"] != 1]
    assert not stacked, f"the dashboard stacked copies instead of redrawing in place: {stacked[0]}"
    assert all(s["images"] <= 1 for s in watch.seen), f"figures piled up: {watch.seen}"
    assert final["images"] == 1 and final["samples"] == 1
    # Redrawn: the page showed the figure of more than one step, and the status line of each step in turn.
    shown_steps = sorted({int(m.group(1)) for s in watch.seen for m in [re.match(r"step (\d+)/", s["text"])] if m})
    assert shown_steps == list(range(1, steps + 1)), f"the status line went through every step: {watch.seen}"
    assert len({s["src"] for s in watch.seen if s.get("src")}) >= 2, "the figure was redrawn at a later step"
    # Finished: the last step is shown, the training cell has its execution count, the run folder is complete.
    assert final["text"].startswith(f"step {steps}/{steps}") and re.fullmatch(r"\[\d+\]:", final["cellPrompt"])
    cell = page.locator(".jp-Cell", has=page.locator(DASHBOARD_STATUS))
    _shot(cell.locator(".jp-Cell-outputWrapper"), "05-dashboard-finished.png")
    _assert_clean(page)
    print(f"05_train: run in the browser in {time.time() - start:.0f} s; dashboard states seen: {len(watch.seen)}")
