#!/usr/bin/python3
"""A fault-injecting HTTP proxy for the S3 tests (stdlib only).

It listens on 127.0.0.1 only and forwards every request to the S3 server
(--upstream http://127.0.0.1:PORT), byte for byte, so that SigV4
signatures stay valid (the Host header is kept: the client signed the
proxy's address, and radosgw checks the signature against the Host it is
given).  Rules make it misbehave on chosen requests:

  500        answer HTTP 500 InternalError without forwarding
  503        answer HTTP 503 SlowDown without forwarding
  reset      close the connection without an answer (after reading the request)
  delay      wait delay_ms, then forward
  truncate   forward, then send the answer's head and only half its body
             and close (an answer without a body is not sent at all: the
             request was served, its answer lost)

A rule matches requests by method (exact, or "*") and key (a regular
expression searched in the path, query included); it fires on the nth
matching request counted from when it was set (1-based), and then on the
next count-1 matching ones (count 0: every one from the nth on).

Control (requests whose path starts with /__fault__/, never forwarded):
  POST /__fault__/rules   body: JSON list of rules, replaces the rules and
                          restarts their counters
  POST /__fault__/clear   no rules; the log emptied
  GET  /__fault__/log     JSON list of {"method", "path", "status",
                          "fault"} of every forwarded or faulted request

Usage: faultproxy.py --upstream URL [--port N] [--port-file FILE]
           [--rules JSON]
The port (0: any free one) is written to --port-file once listening.
"""

import argparse
import http.client
import json
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
STATE = {"rules": [], "log": []}


def parse_rules(text):
    rules = json.loads(text) if text else []
    if not isinstance(rules, list):
        raise ValueError("rules: a JSON list")
    out = []
    for r in rules:
        action = str(r.get("action", ""))
        if action not in ("500", "503", "reset", "delay", "truncate"):
            raise ValueError("unknown action %r" % action)
        out.append({
            "action": action,
            "method": str(r.get("method", "*")),
            "key": re.compile(str(r.get("key", ""))),
            "nth": int(r.get("nth", 1)),
            "count": int(r.get("count", 1)),
            "delay_ms": int(r.get("delay_ms", 0)),
            "seen": 0,
        })
    return out


def pick_fault(method, path):
    """The rule that fires on this request, or None (counters advance)."""
    with LOCK:
        fired = None
        for r in STATE["rules"]:
            if r["method"] not in ("*", method) or not r["key"].search(path):
                continue
            r["seen"] += 1
            n = r["seen"] - r["nth"]
            if fired is None and n >= 0 and (r["count"] == 0 or n < r["count"]):
                fired = r
        return fired


def log(method, path, status, fault):
    with LOCK:
        STATE["log"].append({"method": method, "path": path, "status": status,
                             "fault": fault})


def error_body(code, message):
    return ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code>'
            "<Message>%s</Message></Error>" % (code, message)).encode()


class Handler(socketserver.StreamRequestHandler):
    timeout = 120

    def read_request(self):
        line = self.rfile.readline(65537)
        if not line:
            return None
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3:
            raise ValueError("bad request line")
        headers = []
        length = 0
        while True:
            h = self.rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            value = value.strip()
            headers.append((name, value))
            if name.lower() == "content-length":
                length = int(value)
            if name.lower() == "transfer-encoding":
                raise ValueError("chunked bodies are not supported")
        body = self.rfile.read(length) if length else b""
        return parts[0], parts[1], headers, body

    def send(self, status, reason, headers, body, close=False):
        out = ["HTTP/1.1 %d %s" % (status, reason)]
        for k, v in headers:
            out.append("%s: %s" % (k, v))
        if close:
            out.append("Connection: close")
        head = ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(head + body)
        self.wfile.flush()

    def control(self, method, path, body):
        if method == "POST" and path == "/__fault__/rules":
            rules = parse_rules(body.decode())
            with LOCK:
                STATE["rules"] = rules
            return 200, b"ok"
        if method == "POST" and path == "/__fault__/clear":
            with LOCK:
                STATE["rules"] = []
                STATE["log"] = []
            return 200, b"ok"
        if method == "GET" and path == "/__fault__/log":
            with LOCK:
                return 200, json.dumps(STATE["log"]).encode()
        return 404, b"unknown control request"

    def handle(self):
        upstream = None
        try:
            while True:
                req = self.read_request()
                if req is None:
                    return
                method, path, headers, body = req
                if path.startswith("/__fault__/"):
                    try:
                        status, text = self.control(method, path, body)
                    except (ValueError, KeyError) as e:
                        status, text = 400, str(e).encode()
                    self.send(status, "OK" if status == 200 else "Error",
                              [("Content-Length", str(len(text)))], text)
                    continue
                rule = pick_fault(method, path)
                action = rule["action"] if rule else None
                if action == "reset":
                    log(method, path, 0, "reset")
                    # an RST, not a polite FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    return
                if action in ("500", "503"):
                    code = "InternalError" if action == "500" else "SlowDown"
                    text = error_body(code, "injected by faultproxy")
                    log(method, path, int(action), action)
                    self.send(int(action), "Injected",
                              [("Content-Type", "application/xml"),
                               ("Content-Length", str(len(text)))], text)
                    continue
                if action == "delay":
                    time.sleep(rule["delay_ms"] / 1000.0)
                if upstream is None:
                    upstream = http.client.HTTPConnection(UPSTREAM.hostname,
                                                          UPSTREAM.port, timeout=120)
                hdrs = {}
                upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    upstream.putheader(k, v)
                    hdrs[k.lower()] = v
                upstream.endheaders(body if body else None)
                resp = upstream.getresponse()
                data = resp.read()  # HEAD: b"", and the connection is ready again
                rh = [(k, v) for k, v in resp.getheaders()
                      if k.lower() not in ("transfer-encoding", "connection")]
                if method != "HEAD" and not any(k.lower() == "content-length" for k, _ in rh):
                    rh.append(("Content-Length", str(len(data))))
                if action == "truncate":
                    log(method, path, resp.status, "truncate")
                    if len(data) >= 2:
                        self.send(resp.status, resp.reason, rh, data[: len(data) // 2],
                                  close=True)
                    # else the answer is lost whole: the request was served
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                log(method, path, resp.status, action or "")
                self.send(resp.status, resp.reason, rh, data)
        except (ConnectionError, socket.timeout, ValueError, http.client.HTTPException) as e:
            sys.stderr.write("faultproxy: %s\n" % e)
        finally:
            if upstream is not None:
                upstream.close()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global UPSTREAM
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--rules", default="")
    a = ap.parse_args()
    UPSTREAM = urllib.parse.urlsplit(a.upstream)
    if UPSTREAM.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("faultproxy: the upstream must be on this machine (127.0.0.1)")
    STATE["rules"] = parse_rules(a.rules)
    srv = Server(("127.0.0.1", a.port), Handler)
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        import os
        os.rename(a.port_file + ".tmp", a.port_file)
    else:
        print(port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
