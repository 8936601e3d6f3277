#!/usr/bin/env python3
"""Client for validation/test_serve.sh: talks to `mindpipe serve` with the standard library only.

  serve_client.py load URL --requests N --concurrency K --out FILE.jsonl
      Sends requests 0..N-1 (prompt, max_tokens, temperature, top_k, seed, request_id all functions
      of i) from K threads at once; writes one line per request: {"i", "tokens", "finish_reason"}.
  serve_client.py bad URL --context T
      Bad input: each case must get its 4xx status with a JSON error, and the server must keep
      serving (a good request after each). Prints PASS/FAIL lines; exit 1 if any failed.
  serve_client.py stream URL --requests N --out FILE.jsonl
      Requests 0..N-1 one at a time with "stream": true (server-sent events), gathered into the
      load file's format.
  serve_client.py get URL PATH      prints the status and the body.
  serve_client.py request I         request I's fields, tab-separated (for mindpipe generate).
  serve_client.py tokens FILE I OUT request I's completion bytes from a load file into OUT.
"""
import argparse
import http.client
import json
import socket
import sys
import threading
import time
import urllib.parse

PROMPTS = ["And God said", "In the beginning", "Jesus wept", "The LORD is my shepherd", "A"]
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


def request_of(i, max_tokens=None):
    """Request i: its prompt, length and sampling settings vary with i (max_tokens: a fixed length)."""
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens or 8 + (i * 7) % 25,
            "temperature": 0 if i % 3 == 0 else 0.9, "top_k": 0 if i % 2 else 20, "seed": 1000 + i, "request_id": i}


def post(url, body, headers=None, timeout=120):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    c.request("POST", "/v1/completions", body=body, headers=headers or {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def get(url, path):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def cmd_load(a):
    results = [None] * a.requests
    lat = [0.0] * a.requests
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= a.requests:
                return
            t0 = time.time()
            st, data = post(a.url, json.dumps(request_of(i, a.max_tokens)))
            lat[i] = time.time() - t0
            if st != 200:
                results[i] = {"i": i, "status": st, "error": data.decode(errors="replace")}
                continue
            ch = json.loads(data)["choices"][0]
            results[i] = {"i": i, "tokens": ch["tokens"], "finish_reason": ch["finish_reason"]}

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    with open(a.out, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    toks = sum(len(r.get("tokens", [])) for r in results)
    if a.summary:  # one JSON line for the benchmark: tokens/s and latency quantiles
        q = sorted(lat)
        print(json.dumps({"seconds": dt, "tokens": toks, "tokens_per_s": toks / dt,
                          "p50": q[len(q) // 2], "p90": q[int(0.9 * (len(q) - 1))], "p99": q[int(0.99 * (len(q) - 1))]}))
        return
    print("%d requests from %d clients in %.2f s: %d tokens, %.1f tokens/s" % (a.requests, a.concurrency, dt, toks,
                                                                               toks / dt))


def cmd_stream(a):
    """Requests 0..N-1 one at a time with "stream": true: their tokens gathered from the events, in
    the load file's format; prints the number of events."""
    u = urllib.parse.urlparse(a.url)
    events = 0
    with open(a.out, "w") as f:
        for i in range(a.requests):
            q = dict(request_of(i), stream=True)
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps(q), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            ctype = r.getheader("Content-Type")
            body = r.read().decode()
            c.close()
            tokens, reason, done = [], None, False
            for line in body.split("\n"):
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                ch = json.loads(line[6:])["choices"][0]
                tokens += ch["tokens"]
                reason = ch["finish_reason"] or reason
                events += 1
            ok = r.status == 200 and ctype == "text/event-stream" and done
            f.write(json.dumps({"i": i, "tokens": tokens, "finish_reason": reason} if ok else
                               {"i": i, "status": r.status, "error": body[:200]}) + "\n")
    print("%d streamed requests, %d events" % (a.requests, events))


def expect(url, what, body, status, needle, headers=None):
    st, data = post(url, body, headers)
    try:
        msg = json.loads(data)["error"]["message"]
    except Exception:
        msg = None
    check(st == status and msg is not None and needle in msg,
          "%s: %d with a JSON error naming '%s' (got %d: %s)" % (what, status, needle, st, data[:160]))
    good = post(url, json.dumps({"prompt": "And", "max_tokens": 2, "temperature": 0}))[0]
    check(good == 200, "%s: the server still serves (a good request: %d)" % (what, good))


def cmd_bad(a):
    T = a.context
    url = a.url
    expect(url, "malformed JSON", b'{"prompt": "And', 400, "malformed JSON")
    expect(url, "not an object", b'[1, 2]', 400, "JSON object")
    expect(url, "missing prompt", json.dumps({"max_tokens": 3}), 400, "prompt")
    expect(url, "prompt not a string", json.dumps({"prompt": 5}), 400, "prompt")
    expect(url, "unknown field", json.dumps({"prompt": "a", "max_token": 3}), 400, "max_token")
    expect(url, "negative max_tokens", json.dumps({"prompt": "a", "max_tokens": -1}), 400, "max_tokens")
    expect(url, "huge max_tokens", json.dumps({"prompt": "a", "max_tokens": 10 ** 12}), 400, "max_tokens")
    expect(url, "max_tokens not an integer", json.dumps({"prompt": "a", "max_tokens": "ten"}), 400, "max_tokens")
    expect(url, "prompt longer than the context", json.dumps({"prompt": "x" * T}), 400, "context")
    expect(url, "empty prompt", json.dumps({"prompt": ""}), 400, "empty")
    expect(url, "temperature -1", json.dumps({"prompt": "a", "temperature": -1}), 400, "temperature")
    expect(url, "top_k beyond the vocabulary", json.dumps({"prompt": "a", "top_k": 100000}), 400, "top_k")
    expect(url, "stream not a boolean", json.dumps({"prompt": "a", "stream": "yes"}), 400, "stream")
    expect(url, "invalid UTF-8", b'{"prompt": "\xff\xfe abc"}', 400, "malformed JSON")
    expect(url, "duplicate key", b'{"prompt": "a", "prompt": "b"}', 400, "malformed JSON")
    expect(url, "an oversized body", json.dumps({"prompt": "a" * 100000}), 413, "bytes")
    u = urllib.parse.urlparse(url)
    for method, path, status in (("GET", "/v1/completions", 405), ("POST", "/health", 405), ("GET", "/nope", 404)):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request(method, path)
        r = c.getresponse()
        body = r.read()
        c.close()
        check(r.status == status and b"error" in body, "%s %s: %d (got %d)" % (method, path, status, r.status))
    # A streaming client that goes away after its first event: the server serves on.
    s = socket.create_connection((u.hostname, u.port))
    body = json.dumps({"prompt": "And", "max_tokens": 60, "temperature": 0, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    first = s.recv(200)
    s.close()
    st, _ = post(url, json.dumps({"prompt": "And", "max_tokens": 2, "temperature": 0}))
    check(first.startswith(b"HTTP/1.1 200") and st == 200,
          "a streaming client that disconnects after its first bytes: the server serves on (%d)" % st)
    # A slow client: headers promise a body that never comes. Others are served meanwhile, and
    # the server closes the idle connection itself (10 s).
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"prompt\": ")
    t0 = time.time()
    st, _ = post(url, json.dumps({"prompt": "And", "max_tokens": 2, "temperature": 0}))
    check(st == 200 and time.time() - t0 < 5, "a slow client holding a half-sent request does not stop another (%d in "
          "%.2f s)" % (st, time.time() - t0))
    s.settimeout(30)
    closed = False
    t0 = time.time()
    try:
        closed = s.recv(100) == b""
    except (ConnectionResetError, socket.timeout):
        closed = True
    check(closed and time.time() - t0 < 25, "the server closes the slow client's connection (after %.1f s)" %
          (time.time() - t0))
    s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    l = sub.add_parser("load")
    l.add_argument("url")
    l.add_argument("--requests", type=int, required=True)
    l.add_argument("--concurrency", type=int, required=True)
    l.add_argument("--out", required=True)
    l.add_argument("--max-tokens", type=int, help="every request this long (default: varies with i)")
    l.add_argument("--summary", action="store_true", help="print one JSON line with latency quantiles")
    b = sub.add_parser("bad")
    b.add_argument("url")
    b.add_argument("--context", type=int, required=True)
    sm = sub.add_parser("stream")
    sm.add_argument("url")
    sm.add_argument("--requests", type=int, required=True)
    sm.add_argument("--out", required=True)
    g = sub.add_parser("get")
    g.add_argument("url")
    g.add_argument("path")
    r = sub.add_parser("request")
    r.add_argument("i", type=int)
    t = sub.add_parser("tokens")
    t.add_argument("file")
    t.add_argument("i", type=int)
    t.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "load":
        cmd_load(a)
    elif a.cmd == "bad":
        cmd_bad(a)
    elif a.cmd == "stream":
        cmd_stream(a)
    elif a.cmd == "request":  # tab-separated, for the shell: prompt, max_tokens, temperature, top_k, seed, request_id
        q = request_of(a.i)
        print("\t".join(str(q[k]) for k in ("prompt", "max_tokens", "temperature", "top_k", "seed", "request_id")))
    elif a.cmd == "tokens":  # request i's completion bytes from a load file
        with open(a.file) as f:
            rows = [json.loads(x) for x in f]
        with open(a.out, "wb") as f:
            f.write(bytes(rows[a.i]["tokens"]))
    else:
        st, data = get(a.url, a.path)
        print(st)
        sys.stdout.write(data.decode(errors="replace"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
