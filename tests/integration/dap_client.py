"""A minimal Debug Adapter Protocol client for the tests: what VS Code sends when it attaches.

DAP messages are JSON objects framed like HTTP: "Content-Length: N\\r\\n\\r\\n" then N bytes.
Requests get responses (matched by request_seq); events arrive in between and are kept
until asked for.
"""
import json
import socket
import time


class DAPError(AssertionError):
    pass


class DAP:
    def __init__(self, host, port, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.seq = 0
        self.pending_events = []
        self.transcript = []  # every message in and out, for failure reports

    def close(self):
        self.sock.close()

    def send(self, command, **arguments):
        self.seq += 1
        msg = {"seq": self.seq, "type": "request", "command": command, "arguments": arguments}
        data = json.dumps(msg).encode()
        self.transcript.append((">", msg))
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        return self.seq

    def _recv_more(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise DAPError("no DAP message in time; transcript: %s" % self.transcript[-6:])
        if not chunk:
            raise DAPError("the debug adapter closed the connection")
        self.buf += chunk

    def _message(self, deadline):
        while b"\r\n\r\n" not in self.buf:
            self._recv_more(deadline)
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        length = None
        for line in head.split(b"\r\n"):
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise DAPError("a DAP message without Content-Length: %r" % head)
        self.buf = rest
        while len(self.buf) < length:
            self._recv_more(deadline)
        body, self.buf = self.buf[:length], self.buf[length:]
        msg = json.loads(body)
        self.transcript.append(("<", msg))
        return msg

    def response(self, seq, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("type") == "response" and m.get("request_seq") == seq:
                return m
            if m.get("type") == "event":
                self.pending_events.append(m)

    def request(self, command, timeout=30, **arguments):
        """Send a request, wait for its response; its body, or DAPError if it failed."""
        r = self.response(self.send(command, **arguments), timeout)
        if not r.get("success"):
            raise DAPError("%s failed: %s" % (command, r.get("message")))
        return r.get("body") or {}

    def event(self, name, timeout=30):
        for i, e in enumerate(self.pending_events):
            if e.get("event") == name:
                return self.pending_events.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("type") == "event" and m.get("event") == name:
                return m
            if m.get("type") == "event":
                self.pending_events.append(m)
