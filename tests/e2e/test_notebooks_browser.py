"""The example notebooks in a real browser: JupyterLab and headless Chromium, against the lab.

JupyterLab runs on a free port of 127.0.0.1 with a token and its own config, data, runtime and
settings folders under the test's tmp_path (nothing touches the home folder); the kernel it
starts gets ``KUBECONFIG`` and ``VSLICE_NAMESPACE`` like a user's would. Chromium opens the
notebooks, runs them with the Run menu's "Run All Cells", checks the widgets render as widgets
(not as "Loading widget..." or their text repr), then drives the SlicePicker like a user:
pick a model, type a memory size, see the plan change, click Submit and see it disabled, and
exactly one pod created. Screenshots at a 1,000 px wide window go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, LabHandle
from polling import until

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts"
WINDOW = (1000, 1400)
BROKEN_OUTPUT = (
    "Loading widget",
    "Error displaying widget",
    "SlicePicker(children=",
    "ClusterView(children=",
    "Traceback (most recent call last)",
)


def _selenium() -> Any:
    try:
        from selenium import webdriver
    except ImportError:
        pytest.fail("selenium is not installed: pip install -e '.[notebook]' (.ci/setup does)")
    return webdriver


def _chromedriver() -> str:
    found = shutil.which("chromedriver")
    if found is None:
        pytest.fail(
            "chromedriver is not installed: apt-get install chromium-driver "
            "(CI installs it: .ci/setup.d/50-sdk.sh)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class JupyterLab:
    url: str
    token: str
    root: Path
    log: Path

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?token={self.token}", timeout=5) as r:
            return json.load(r)

    def kernels_idle(self) -> bool:
        sessions = self.api("/api/sessions")
        return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)


def _settings(folder: Path) -> None:
    """Every cell in the DOM (no windowing) and no news or update checks."""
    notebook = folder / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True)
    (notebook / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    apputils = folder / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)
    (apputils / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


@pytest.fixture
def jupyter_lab(services: LabHandle, namespace: str, tmp_path: Path) -> Iterator[JupyterLab]:
    root = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, root)
    dirs = {
        name: tmp_path / "jupyter" / name.lower()
        for name in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR",
            "JUPYTER_RUNTIME_DIR",
            "JUPYTERLAB_SETTINGS_DIR",
            "JUPYTERLAB_WORKSPACES_DIR",
            "IPYTHONDIR",
        )
    }
    for folder in dirs.values():
        folder.mkdir(parents=True)
    _settings(dirs["JUPYTERLAB_SETTINGS_DIR"])
    env = {
        **os.environ,
        **{name: str(folder) for name, folder in dirs.items()},
        "KUBECONFIG": str(services.kubeconfig),
        "VSLICE_NAMESPACE": namespace,
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    token, port = uuid.uuid4().hex, _free_port()
    log = tmp_path / "jupyterlab.log"
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",  # CI runs as root; the server listens on 127.0.0.1 with a token
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=",
        "--LabApp.extension_manager=readonly",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    handle = JupyterLab(f"http://127.0.0.1:{port}", token, root, log)
    try:

        def up() -> bool:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited: {log.read_text()[-3000:]}")
            try:
                return bool(handle.api("/api/status"))
            except OSError:
                return False

        until("JupyterLab answers", up, 90)
        yield handle
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End JupyterLab (its own process group); on SIGTERM it shuts its kernels down."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    webdriver = _selenium()
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    service = Service(executable_path=_chromedriver(), log_output=str(tmp_path / "driver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_window_size(*WINDOW)
    try:
        yield driver
    finally:
        driver.quit()


# --- driving JupyterLab ------------------------------------------------------------------


def _by() -> Any:
    from selenium.webdriver.common.by import By

    return By


def _open_and_run_all(driver: Any, lab: JupyterLab, notebook: str) -> None:
    """Open the notebook, wait for its kernel, Run > Run All Cells, wait until all ran."""
    by = _by()
    driver.get(f"{lab.url}/lab/tree/{notebook}?token={lab.token}&reset")
    until("the notebook opens", lambda: driver.find_elements(by.CSS_SELECTOR, ".jp-CodeCell"), 90)
    until("the kernel is idle", lab.kernels_idle, 90)
    _hide_left_sidebar(driver)
    menu = until(
        "the Run menu",
        lambda: [
            m
            for m in driver.find_elements(by.CSS_SELECTOR, ".lm-MenuBar-item")
            if m.text.strip() == "Run"
        ],
        30,
    )
    menu[0].click()
    item = until(
        "Run All Cells in the Run menu",
        lambda: driver.find_elements(by.CSS_SELECTOR, '.lm-Menu-item[data-command$=":run-all"]'),
        10,
    )
    item[0].click()

    def all_ran() -> bool:
        prompts = [
            p.text.strip()
            for p in driver.find_elements(by.CSS_SELECTOR, ".jp-CodeCell .jp-InputPrompt")
        ]
        done = bool(prompts) and all(p.startswith("[") and p[1:-2].isdigit() for p in prompts)
        return done and lab.kernels_idle()

    until(f"every cell of {notebook} ran", all_ran, 150, pause=1.0)


def _hide_left_sidebar(driver: Any) -> None:
    """Collapse the file browser so the notebook gets the window's width."""
    by = _by()
    for tab in driver.find_elements(by.CSS_SELECTOR, ".jp-SideBar.jp-mod-left .lm-TabBar-tab"):
        if "lm-mod-current" in (tab.get_attribute("class") or ""):
            tab.click()


def _outputs(driver: Any) -> list[Any]:
    result: list[Any] = driver.find_elements(by=_by().CSS_SELECTOR, value=".jp-OutputArea-output")
    return result


def _assert_outputs_render(driver: Any, notebook: str) -> str:
    text = "\n".join(o.text for o in _outputs(driver))
    for broken in BROKEN_OUTPUT:
        assert broken not in text, f"{notebook}: an output shows {broken!r}:\n{text[-3000:]}"
    return text


def _widget_output(driver: Any, selector: str) -> Any:
    by = _by()
    for output in _outputs(driver):
        if output.find_elements(by.CSS_SELECTOR, selector):
            return output
    pytest.fail(f"no output holds {selector}")


def _shot(element: Any, driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", element)
    time.sleep(0.3)
    element.screenshot(str(path))
    assert path.stat().st_size > 2000, f"{name} is empty"
    return path


def _pod_names(services: LabHandle, namespace: str) -> set[str]:
    pods = services.core.list_namespaced_pod(namespace, _preload_content=False)
    return {p["metadata"]["name"] for p in json.loads(pods.data)["items"]}


# --- the tests -----------------------------------------------------------------------------


def test_the_widgets_render_and_the_picker_submits_one_pod_from_the_browser(
    services: LabHandle, namespace: str, jupyter_lab: JupyterLab, browser: Any
) -> None:
    by = _by()
    # A pod no GPU can hold: the cluster view lists it under Pending with the engine's reason.
    huge = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "102400"}
    services.create_pod(namespace, "huge", limits=huge)
    # A busy GPU: all of an A100's memory (only an A100 has 80 GiB), 90% of its cores.
    busy = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "81920", "nvidia.com/gpucores": "90"}
    services.create_pod(namespace, "busy", limits={**busy})
    services.wait_for_pod(
        namespace, "busy", lambda p: bool(p["spec"].get("nodeName")), what="placed"
    )
    _open_and_run_all(browser, jupyter_lab, "02-cluster-view.ipynb")
    _assert_outputs_render(browser, "02-cluster-view")
    assert browser.find_elements(by.CSS_SELECTOR, ".jupyter-widgets")
    view = _widget_output(browser, ".widget-hprogress")
    # Two bars (memory, cores) per GPU of inventory/lab/cluster.yaml: 17 GPUs, both paths.
    assert len(view.find_elements(by.CSS_SELECTOR, ".widget-hprogress")) == 2 * 17
    assert "memory (GiB)" in view.text and "slots" in view.text
    assert f"{namespace}/huge" in view.text and "Pending (1)" in view.text
    assert "80 / 80 GiB" in view.text and "90%" in view.text
    assert _clipped(browser, view) == []

    picker = _widget_output(browser, ".widget-dropdown select")
    from selenium.webdriver.support.ui import Select

    select = Select(picker.find_element(by.CSS_SELECTOR, ".widget-dropdown select"))
    t4 = next(o.text for o in select.options if o.text.startswith("Tesla-T4"))
    select.select_by_visible_text(t4)
    # The slider's range shows the choice took effect. (Binpack tries the smallest GPUs first,
    # so the plan of the default choice may name the T4 node already: its text alone does not.)
    until("the memory range follows the model", lambda: "15.0" in _slider_max(picker), 10)
    _type_memory(browser, picker, "8")
    until("the plan names the T4 node", lambda: "lab-t4" in picker.text, 15)
    submit = picker.find_element(by.XPATH, ".//button[normalize-space()='Submit']")
    until("Submit is enabled", submit.is_enabled, 10)
    existing = _pod_names(services, namespace)
    submit.click()
    until("Submit is disabled after a submit", lambda: not submit.is_enabled(), 15)
    submit.click()  # a disabled button: nothing happens
    until("the status line follows the pod", lambda: "Running on lab-t4" in picker.text, 60)
    new = _pod_names(services, namespace) - existing
    assert len(new) == 1, f"Submit created {sorted(new)}"
    assert not submit.is_enabled()
    (pod,) = new
    # The notebook's last cell stopped the view's timer: its Refresh button reads the cluster.
    view.find_element(by.XPATH, ".//button[normalize-space()='Refresh']").click()
    until("the cluster view shows the pod", lambda: f"{namespace}/{pod}" in view.text, 20)
    assert _clipped(browser, picker) == []
    _shot(picker, browser, "jupyterlab-slice-picker.png")
    _shot(view, browser, "jupyterlab-cluster-view.png")

    # Four whole T4s: one holds the new pod, so it cannot fit; the why-not shows as lines.
    _type_memory(browser, picker, "15")
    _type_gpus(picker, "4")
    until("the plan says it does not fit", lambda: "does not fit" in picker.text, 15)
    why = picker.find_element(by.CSS_SELECTOR, "div[style*='pre-wrap']")
    assert len(why.text.splitlines()) >= 2 and "\\n" not in picker.text
    assert not submit.is_enabled()
    assert _clipped(browser, picker) == []
    _shot(picker, browser, "jupyterlab-slice-picker-no-fit.png")


def _clipped(driver: Any, root: Any) -> list[str]:
    """What in ``root`` (itself included) is wider than its box and cuts or scrolls it: an
    ellipsized label, a table behind a horizontal scroll bar."""
    found: list[str] = driver.execute_script(
        "const all = [arguments[0], ...arguments[0].querySelectorAll('*')];"
        "return all.filter(e => e.scrollWidth > e.clientWidth + 1"
        " && getComputedStyle(e).overflowX !== 'visible')"
        ".map(e => `${e.className} (${e.scrollWidth} > ${e.clientWidth} px): `"
        " + e.textContent.slice(0, 80));",
        root,
    )
    return found


def _slider_max(picker: Any) -> str:
    handle = picker.find_element(_by().CSS_SELECTOR, ".widget-slider .noUi-handle")
    return str(handle.get_attribute("aria-valuemax") or "")


def _type_memory(driver: Any, picker: Any, gib: str) -> None:
    """Type into the memory slider's readout and press Enter, as a user does."""
    from selenium.webdriver.common.keys import Keys

    by = _by()
    slider = picker.find_element(
        by.XPATH,
        ".//div[contains(@class,'widget-slider')][.//label[normalize-space()='memory GiB']]",
    )
    readout = slider.find_element(by.CSS_SELECTOR, ".widget-readout")
    readout.click()
    driver.execute_script(
        "const r = document.createRange(); r.selectNodeContents(arguments[0]);"
        "const s = window.getSelection(); s.removeAllRanges(); s.addRange(r);",
        readout,
    )
    readout.send_keys(gib, Keys.ENTER)
    until("the memory slider took the value", lambda: readout.text.strip() == f"{gib}.0", 10)


def _type_gpus(picker: Any, count: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = picker.find_element(
        _by().XPATH,
        ".//div[contains(@class,'widget-inline-hbox')][.//label[normalize-space()='GPUs']]//input",
    )
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(count, Keys.TAB)


def test_the_capacity_notebook_renders_its_tables_and_plots_in_the_browser(
    services: LabHandle, jupyter_lab: JupyterLab, browser: Any
) -> None:
    by = _by()
    _open_and_run_all(browser, jupyter_lab, "03-capacity-planning.ipynb")
    text = _assert_outputs_render(browser, "03-capacity-planning")
    assert "GPU inventory" in text and "does not fit" in text
    assert len(browser.find_elements(by.CSS_SELECTOR, ".jp-RenderedImage img")) == 2
    inventory = _widget_output(browser, ".vslice-wrap")
    assert inventory.find_element(by.CSS_SELECTOR, ".vslice-wrap").is_displayed()
    assert _clipped(browser, inventory) == []
    _shot(inventory, browser, "jupyterlab-gpu-table.png")
