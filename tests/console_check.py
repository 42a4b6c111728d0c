#!/usr/bin/env python3
"""The operator console (/ui) in a real browser: Debian's headless Chromium through ChromeDriver.

Usage: console_check.py DATA_ADDR ADMIN_ADDR TOKEN ARTEFACT_DIR

DATA_ADDR serves the rules of tests/console_e2e.sh (domain api: user, 5 a minute). While it
checks, this script sends bounded traffic itself: user=alice under her limit (allowed) and
user=mallory far over it (denied). It requires, each within a bounded wait:
  - the page loads with no error in the browser's console (the one expected 401 aside);
  - the chart's allowed and denied series are both above zero within 5 s;
  - the most-limited table lists mallory;
  - the inspector shows mallory's state (0 left of 5) and the explanation of its rule;
  - Reset without the token is refused (401) and with it works (5 left again);
  - at a phone's width the page needs no sideways scrolling.
Screenshots (wide.png, inspector.png, narrow.png) go to ARTEFACT_DIR. Prints one line per check
and `N passed, M failed`; exits 1 on any failure.
"""
import json
import sys
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

data, admin, token, artefacts = sys.argv[1:5]
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)


def send(user):
    body = json.dumps({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": user}]}]})
    request = urllib.request.Request(f"http://{data}/v1/check", data=body.encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


stop_flood = threading.Event()


def flood():
    # At most 60 s and 6,000 requests: mallory is denied, alice now and then allowed.
    deadline = time.monotonic() + 60
    for i in range(6000):
        if stop_flood.is_set() or time.monotonic() > deadline:
            return
        send("mallory")
        if i % 40 == 0:
            send(f"alice{i // 40}")
        time.sleep(0.01)


def wait_for(what, predicate, seconds):
    deadline = time.monotonic() + seconds
    value = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # the page may be between two renders
            value = e
        time.sleep(0.1)
    return value if value else None


options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1280,1000"):
    options.add_argument(arg)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_page_load_timeout(20)
flooder = threading.Thread(target=flood, daemon=True)
try:
    flooder.start()
    driver.get(f"http://{admin}/ui")
    check("the page is sluice's console", "sluice" in driver.title, driver.title)

    def both_series():
        lines = {p.get_attribute("class"): float(p.get_attribute("data-last") or 0)
                 for p in driver.find_elements(By.CSS_SELECTOR, "#chart polyline")}
        return lines.get("allowed", 0) > 0 and lines.get("denied", 0) > 0
    check("allowed and denied series above zero within 5 s", wait_for("chart", both_series, 5) is True)

    def top_lists_mallory():
        return "user=mallory" in driver.find_element(By.ID, "top").text
    check("the most-limited table lists the flooded key",
          wait_for("top", top_lists_mallory, 20) is True, driver.find_element(By.ID, "top").text)
    check("the rules table names the domain file",
          "api.yaml" in driver.find_element(By.ID, "rules").text, driver.find_element(By.ID, "rules").text)
    check("the backend section says ready", "ready" in driver.find_element(By.ID, "ready").text)
    driver.save_screenshot(f"{artefacts}/wide.png")

    stop_flood.set()
    flooder.join(10)
    Select(driver.find_element(By.ID, "inspect-domain")).select_by_value("api")
    driver.find_element(By.ID, "inspect-descriptors").send_keys("user=mallory")
    driver.find_element(By.CSS_SELECTOR, "#inspect button[type=submit]").click()

    def state_row():
        rows = driver.find_elements(By.CSS_SELECTOR, "#state tbody tr")
        return rows[0].text if rows else None
    row = wait_for("state", state_row, 5) or ""
    check("the inspector shows mallory's state: 0 left of 5", row.split()[1:3] == ["0", "5"], row)
    explanation = wait_for("explain", lambda: driver.find_element(By.ID, "explain").text, 5) or ""
    check("the inspector explains the rule", "matches api.user" in explanation, explanation)

    driver.find_element(By.ID, "reset").click()
    refused = wait_for("refused", lambda: "refused (401)" in driver.find_element(By.ID, "inspect-message").text, 5)
    check("Reset without the token is refused", refused is True,
          driver.find_element(By.ID, "inspect-message").text)
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "reset").click()

    def reset_row():
        r = state_row()
        return r if r and r.split()[1:3] == ["5", "5"] else None
    row = wait_for("reset", reset_row, 5)
    check("Reset with the token works: 5 left again", row is not None, state_row())
    driver.save_screenshot(f"{artefacts}/inspector.png")

    errors = [e for e in driver.get_log("browser")
              if e["level"] == "SEVERE" and "status of 401" not in e["message"]]
    check("no errors in the browser's console", not errors, errors)

    driver.set_window_size(390, 844)
    driver.refresh()
    time.sleep(1.5)
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    check("at a phone's width the page needs no sideways scrolling", overflow <= 1, overflow)
    driver.save_screenshot(f"{artefacts}/narrow.png")
finally:
    stop_flood.set()
    driver.quit()

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
