"""Drive Debian's Chromium headless with the DevTools protocol over a pipe, for the tests of
pages that a server serves (probing serve): load a page, run JavaScript in it, click and drag
with real input events, answer dialogs, take screenshots. No dependency but chromium itself:
--remote-debugging-pipe reads JSON commands on fd 3 and writes replies and events on fd 4,
each message ended by a NUL byte.

    with cdp.Browser(width=1280, height=900) as b:
        b.goto("http://127.0.0.1:1234/?token=...")
        b.wait("document.querySelector('#x') !== null")
        b.click_at(100, 200)
        b.screenshot("page.png")
"""
import base64
import json
import os
import queue
import subprocess
import threading
import time

import browser
import harness


class CDPError(AssertionError):
    pass


class PageError(CDPError):
    """An expression evaluated in the page threw."""


class Browser:
    def __init__(self, width=1280, height=900):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above 4, so that the redirections to 3 and 4 below overwrite none of them.
        to_browser_r, from_browser_w = (self._high(to_browser_r), self._high(from_browser_w))
        profile = harness.tmp(f"cdp-profile-{time.monotonic_ns()}")
        # The pipe ends go to fds 3 and 4 of the browser (bash redirections), nothing else.
        cmd = ["bash", "-c",
               f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} '
               f'{to_browser_r}<&- {from_browser_w}>&-',
               browser.chromium(), *browser.FLAGS, "--remote-debugging-pipe",
               f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        self.proc = harness.spawn(cmd, pass_fds=(to_browser_r, from_browser_w),
                                  stderr=open(harness.tmp("chromium.log"), "ab"))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._replies = {}
        self._cond = threading.Condition()
        self.events = queue.Queue()
        self.console = []
        self.dialogs = []
        self.prompt_answer = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)

    @staticmethod
    def _high(fd):
        import fcntl
        new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return new

    # ---- the protocol ------------------------------------------------------------------------
    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[None] = "the browser exited"
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._event(msg)

    def _event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                         for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.console.append("exception: " + json.dumps(params.get("exceptionDetails"))[:800])
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params)
            # Answer on another thread: the reader must keep reading replies.
            threading.Thread(target=self.send, args=("Page.handleJavaScriptDialog",),
                             kwargs={"session": True, "accept": True,
                                     "promptText": self.prompt_answer or ""},
                             daemon=True).start()
        self.events.put(msg)

    def send(self, method, session=False, timeout=60, **params):
        with self._cond:
            self._next += 1
            mid = self._next
        msg = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                if None in self._replies:
                    raise CDPError(f"{method}: {self._replies[None]}")
                left = end - time.monotonic()
                if left <= 0:
                    raise CDPError(f"{method}: no answer in {timeout} s")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    # ---- what a test does --------------------------------------------------------------------
    def eval(self, expr, timeout=60):
        """Evaluate @expr in the page (awaiting a promise); return its value (JSON)."""
        r = self.send("Runtime.evaluate", session=True, timeout=timeout, expression=expr,
                      awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise PageError(f"{expr[:200]}: {json.dumps(r['exceptionDetails'])[:1200]}")
        return r["result"].get("value")

    def wait(self, expr, timeout=30, what=None):
        """Wait until @expr is truthy in the page; return its value. An expression that
        throws (an element not drawn yet) counts as not yet true."""
        end = time.monotonic() + timeout
        while True:
            try:
                v, error = self.eval(expr), None
            except PageError as e:
                v, error = None, e
            if v:
                return v
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what or expr}; last error: "
                                     f"{error}; console: {self.console[-10:]}")
            time.sleep(0.05)

    def goto(self, url):
        self.send("Page.navigate", session=True, url=url)
        self.wait("document.readyState === 'complete'")

    def mouse(self, kind, x, y, buttons=0, clicks=0):
        self.send("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y,
                  button="left" if kind != "mouseMoved" or buttons else "none",
                  buttons=buttons, clickCount=clicks)

    def click_at(self, x, y):
        """A real click (pressed and released) at page coordinates."""
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, buttons=1, clicks=1)
        self.mouse("mouseReleased", x, y, buttons=0, clicks=1)

    def drag(self, x0, y0, x1, y1, steps=8):
        self.mouse("mouseMoved", x0, y0)
        self.mouse("mousePressed", x0, y0, buttons=1, clicks=1)
        for i in range(1, steps + 1):
            self.mouse("mouseMoved", x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps,
                       buttons=1)
        self.mouse("mouseReleased", x1, y1, buttons=0, clicks=1)

    def click(self, selector):
        """Click the middle of the element @selector of the page."""
        box = self.eval(f"""(function () {{
            var e = document.querySelector({json.dumps(selector)});
            if (!e) return null;
            e.scrollIntoView({{block: 'center'}});
            var r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2];
        }})()""")
        assert box, f"no element {selector} on the page"
        self.click_at(*box)

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", session=True, format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
