"""Headless Chromium driven through Playwright (acpfsm's ``[browser]`` extra), for the
legibility check, the screenshots and the explorer's tests.

The browser is Debian's ``chromium`` package (``/usr/bin/chromium``), or the one
``ACPFSM_CHROMIUM`` names, or ``chromium`` on ``PATH``: Playwright only drives it, nothing is
downloaded. Text is drawn with the system's fonts, so :func:`drawing_font` asks Chromium which
face it actually used (DevTools ``CSS.getPlatformFontsForNode``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .model import DiagramError

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["BROWSER_HINT", "chromium_path", "drawing_font", "open_browser"]

BROWSER_HINT = (
    "install Debian's chromium and fonts-dejavu-core (apt-get install chromium "
    "fonts-dejavu-core; .ci/install-chromium does it as root) or set ACPFSM_CHROMIUM, "
    "and acpfsm's [browser] extra (pip install 'acpfsm[browser]')"
)


def chromium_path() -> str:
    """``$ACPFSM_CHROMIUM``, ``/usr/bin/chromium``, else ``chromium`` on ``PATH``."""
    for candidate in (os.environ.get("ACPFSM_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise DiagramError(f"no headless Chromium found: {BROWSER_HINT}")
    return found


@contextmanager
def open_browser() -> Iterator[Browser]:
    """A headless Chromium that fetches nothing from the network on its own."""
    exe = chromium_path()
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        raise DiagramError(f"Playwright is not installed: {BROWSER_HINT}") from exc
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(
                executable_path=exe,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                    "--hide-scrollbars",
                    "--font-render-hinting=none",
                ],
            )
        except Error as exc:
            raise DiagramError(f"cannot start {exe}: {exc}") from exc
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Browser, width: int = 1200, height: int = 900) -> Page:
    context = browser.new_context(
        viewport={"width": width, "height": height}, device_scale_factor=1, java_script_enabled=True
    )
    return context.new_page()


def drawing_font(page: Page, selector: str = "svg text") -> str:
    """The family of the font Chromium drew the first ``selector`` element with."""
    session = page.context.new_cdp_session(page)
    try:
        session.send("DOM.enable")
        session.send("CSS.enable")
        root: Any = session.send("DOM.getDocument", {"depth": -1})
        found: Any = session.send(
            "DOM.querySelector", {"nodeId": root["root"]["nodeId"], "selector": selector}
        )
        if not found.get("nodeId"):
            return ""
        fonts: Any = session.send("CSS.getPlatformFontsForNode", {"nodeId": found["nodeId"]})
        used = fonts.get("fonts") or [{}]
        return str(used[0].get("familyName", ""))
    finally:
        session.detach()
