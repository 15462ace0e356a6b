#!/usr/bin/env python3
"""reports/tests/browser_check.py — opens an HTML page in headless Chromium
(Debian's chromium + chromium-driver, driven by python3-selenium) as a reader
would, and fails on what a reader would see go wrong:

  - any console message at error level: a JS exception, console.error, a load
    blocked by the report's Content-Security-Policy or failed for want of a
    network (the report must need none);
  - an expected id missing from the DOM as Chromium rendered it, or an
    expected chart (id chart-*) whose <svg> has no area;
  - any <svg> in the page that rendered with no area.

It saves a PNG screenshot of the top of the page.

usage: browser_check.py PAGE.html [--expect-id ID]... [--screenshot OUT.png]
                        [--width PX] [--height PX]
Exit status: 0 all good, 1 a check failed, 3 no browser.
"""
import argparse
import os
import sys
import tempfile

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PROG = "browser_check"

SVG_AREA_JS = """
const out = [];
for (const s of document.querySelectorAll('svg')) {
  const r = s.getBoundingClientRect();
  const owner = s.closest('[id]');
  out.push([owner ? owner.id : '', r.width, r.height]);
}
return out;
"""


def start_browser(width: int, height: int, tmp_dir: str):
    """Chromium with tmp_dir as its $TMPDIR: it leaves a folder there at every run
    (org.chromium.Chromium.XXXXXX, its singleton socket's), which driver.quit() does not remove."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=%d,%d" % (width, height)):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER, env=dict(os.environ, TMPDIR=tmp_dir)), options=opts)


def console_errors(driver) -> list:
    return ["%s: %s" % (e.get("source", "?"), e.get("message", "")) for e in driver.get_log("browser")
            if e.get("level") == "SEVERE"]


def check_ids(driver, ids: list) -> list:
    from selenium.webdriver.common.by import By
    problems = []
    for element_id in ids:
        found = driver.find_elements(By.ID, element_id)
        if not found:
            problems.append("no element with id %r" % element_id)
        elif element_id.startswith("chart-") and not found[0].find_elements(By.TAG_NAME, "svg"):
            problems.append("chart %r has no <svg>" % element_id)
    return problems


def check_svgs(driver) -> tuple:
    svgs = driver.execute_script(SVG_AREA_JS)
    empty = ["<svg> in #%s rendered %gx%g" % (owner, w, h) for owner, w, h in svgs if w < 50 or h < 50]
    return len(svgs), empty


def check_page(path: str, ids: list, screenshot: str, width: int, height: int) -> int:
    with tempfile.TemporaryDirectory(prefix="browser-check-") as tmp_dir:
        return check_page_in(path, ids, screenshot, width, height, tmp_dir)


def check_page_in(path: str, ids: list, screenshot: str, width: int, height: int, tmp_dir: str) -> int:
    driver = start_browser(width, height, tmp_dir)
    try:
        driver.get("file://" + os.path.abspath(path))
        driver.execute_script("return document.readyState")   # get() returns once the load event fired
        problems = ["console: %s" % e for e in console_errors(driver)]
        problems += check_ids(driver, ids)
        n_svg, empty = check_svgs(driver)
        problems += empty
        title = driver.title
        if screenshot:
            driver.execute_script("window.scrollTo(0, 0)")
            if not driver.save_screenshot(screenshot):
                problems.append("could not save the screenshot %s" % screenshot)
        problems += ["console: %s" % e for e in console_errors(driver)]   # anything logged since
    finally:
        driver.quit()
    for p in problems:
        print("%s: FAIL: %s: %s" % (PROG, path, p), file=sys.stderr)
    if problems:
        return 1
    print("%s: OK: %s (%r): %d ids present, %d SVG charts rendered, no console error%s"
          % (PROG, path, title, len(ids), n_svg, "; screenshot " + screenshot if screenshot else ""))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--expect-id", action="append", default=[], metavar="ID")
    ap.add_argument("--screenshot", metavar="OUT.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args()
    if not os.path.isfile(args.page):
        print("%s: %s: no such file" % (PROG, args.page), file=sys.stderr)
        return 2
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not os.access(tool, os.X_OK):
            print("%s: %s not found (apt-get install chromium chromium-driver)" % (PROG, tool), file=sys.stderr)
            return 3
    try:
        import selenium  # noqa: F401
    except ImportError as e:
        print("%s: selenium not importable by %s (%s): apt-get install python3-selenium"
              % (PROG, sys.executable, e), file=sys.stderr)
        return 3
    return check_page(args.page, args.expect_id, args.screenshot, args.width, args.height)


if __name__ == "__main__":
    sys.exit(main())
