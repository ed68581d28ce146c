#!/usr/bin/env python3
"""Soak/stress run of `kvasir serve`: thousands of mixed good, bad and abandoned requests from
many threads for a bounded time, with the server's RSS, open file descriptors and gauges sampled
throughout. Ends with the server idle again and prints a table: RSS growth after warm-up, every
gauge back to 0, and the answers by status (anything but the intended 4xx counts as an error).

  bench/soak.py [--bin build/bin/kvasir] [-m MODEL] [--seconds 120] [--threads 16] [--json out.json] [--hostile]

--hostile adds the mix of the second outside probe (docs/API.md, "Request limits"): nesting 150,000
deep on /api/embed and /api/embeddings, Ollama routes without the key, a json_schema with 4,000
optional properties, a 100,000-alias $ref chain, oneOf with 10,000 branches, deep JSON on
/api/show, 10,000 tools, 16 stop strings of 400 kB with n=64, and prompt_logprobs with n=8: each
must be answered as intended (4xx, or 200 for the shared prompt scores) while RSS stays flat.

Python standard library only. The server is started on a free loopback port with a small KV pool.
"""
import argparse
import collections
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "soak-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_sample(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


class Soak:
    def __init__(self, port, seconds, threads, seed, hostile=False):
        self.port, self.seconds, self.threads, self.hostile = port, seconds, threads, hostile
        self.rng = random.Random(seed)
        self.counts = collections.Counter()  # (kind, status)
        self.errors = collections.Counter()  # unexpected outcomes
        self.lock = threading.Lock()
        self.stop = threading.Event()

    # -- the request mix ------------------------------------------------------------------------
    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(self, path, body, headers=None, read=True):
        h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **(headers or {})}
        c = self.conn()
        c.request("POST", path, body=body if isinstance(body, (bytes, str)) else json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read() if read else b""
        c.close()
        return r.status, data

    def note(self, kind, status, expected):
        with self.lock:
            self.counts[(kind, status)] += 1
            if status not in expected:
                self.errors[(kind, status)] += 1

    def good_completion(self, rng):
        body = {"prompt": "Once upon a time " * rng.randint(1, 20), "max_tokens": rng.randint(1, 32),
                "temperature": rng.choice([0, 0.8])}
        s, _ = self.post("/v1/completions", body)
        self.note("good_completion", s, {200})

    def good_chat_stream(self, rng):
        body = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": rng.randint(1, 24),
                "stream": True}
        s, data = self.post("/v1/chat/completions", body)
        ok = s == 200 and data.rstrip().endswith(b"data: [DONE]")
        self.note("good_chat_stream", s if ok else -s, {200})

    def bad_request(self, rng):
        bodies = [b'{"prompt": "x",', b"[]", json.dumps({"prompt": "x", "max_tokens": -1}),
                  json.dumps({"prompt": "x", "temperature": "hot"}), b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                  json.dumps({"prompt": [99999999]})]
        path = rng.choice(["/v1/completions", "/v1/chat/completions"])
        s, _ = self.post(path, rng.choice(bodies))
        self.note("bad_request", s, {400})

    def too_long(self, rng):
        s, _ = self.post("/v1/completions", json.dumps({"prompt": "z" * (4 << 20), "max_tokens": 1}))
        self.note("too_long", s, {400})

    def wrong_route(self, rng):
        c = self.conn()
        method, path, expected = rng.choice([("GET", "/v1/completions", 405), ("GET", "/nope", 404),
                                             ("POST", "/v1/models", 405)])
        c.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
        r = c.getresponse()
        r.read()
        c.close()
        self.note("wrong_route", r.status, {expected})

    def wrong_type_or_key(self, rng):
        if rng.random() < 0.5:
            s, _ = self.post("/v1/completions", json.dumps({"prompt": "x"}), {"Content-Type": "text/plain"})
            self.note("text_plain", s, {415})
        else:
            s, _ = self.post("/v1/completions", {"prompt": "x"}, {"Authorization": "Bearer wrong"})
            self.note("bad_key", s, {401})

    def send_generation(self, stream):
        """A long completion on a raw socket, which the caller then abandons."""
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "stream": stream, "ignore_eos": True})
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        return sock

    def abandoned_stream(self, rng):
        sock = self.send_generation(stream=True)
        sock.recv(rng.randint(1, 4096))  # hang up mid-stream
        sock.close()
        self.note("abandoned_stream", 0, {0})

    def abandoned_whole(self, rng):
        sock = self.send_generation(stream=False)
        time.sleep(rng.uniform(0.0, 0.3))  # hang up before the answer
        sock.close()
        self.note("abandoned_whole", 0, {0})

    def idle_and_partial(self, rng):
        socks = []
        for i in range(rng.randint(5, 40)):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            if i % 2:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len")
            socks.append(s)
        time.sleep(rng.uniform(0.1, 1.0))
        for s in socks:
            s.close()
        self.note("idle_connections", 0, {0})

    # -- the hostile mix (--hostile) -------------------------------------------------------------
    DEEP = b"[" * 150000 + b"]" * 150000

    def deep_embed(self, rng):
        if rng.random() < 0.5:
            s, _ = self.post("/api/embed", b'{"model": "m", "input": ' + self.DEEP + b"}")
        else:
            s, _ = self.post("/api/embeddings", b'{"model": "m", "prompt": ' + self.DEEP + b"}")
        self.note("deep_embed", s, {400})

    def ollama_no_key(self, rng):
        method, path = rng.choice([("POST", "/api/generate"), ("POST", "/api/chat"), ("POST", "/api/embed"),
                                   ("POST", "/api/embeddings"), ("POST", "/api/show"), ("GET", "/api/tags"),
                                   ("GET", "/api/ps"), ("GET", "/api/version")])
        c = self.conn()
        body = json.dumps({"model": "m", "prompt": "hi", "input": "hi", "messages": []}) if method == "POST" else None
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        self.note("ollama_no_key", r.status, {401})

    def schema(self, schema):
        return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}

    def hostile_schema(self, rng):
        kind = rng.choice(["optional", "ref_chain", "one_of"])
        if kind == "optional":
            schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(4000)}}
        elif kind == "ref_chain":
            defs = {f"a{i}": {"$ref": f"#/$defs/a{i + 1}"} for i in range(100000)}
            defs["a100000"] = {"type": "string"}
            schema = {"$ref": "#/$defs/a0", "$defs": defs}
        else:
            schema = {"oneOf": [{"const": i} for i in range(10000)]}
        s, _ = self.post("/v1/chat/completions", self.schema(schema))
        self.note(f"schema_{kind}", s, {400})

    def deep_show(self, rng):
        s, _ = self.post("/api/show", b'{"model": ' + b"[" * 400000 + b"]" * 400000 + b"}")
        self.note("deep_show", s, {400})

    def many_tools(self, rng):
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        s, _ = self.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [tool] * 10000})
        self.note("many_tools", s, {400})

    def big_stops(self, rng):
        s, _ = self.post("/v1/completions", {"prompt": "x", "max_tokens": 4, "n": 64, "stop": ["s" * 400000] * 16})
        self.note("big_stops", s, {400})

    def scored_choices(self, rng):
        s, data = self.post("/v1/completions", {"prompt": "Once upon a time there was", "max_tokens": 1, "n": 8,
                                                "prompt_logprobs": 1, "temperature": 0.8})
        ok = s == 200 and len(json.loads(data)["choices"]) == 8
        self.note("scored_choices", s if ok else -s, {200})

    HOSTILE = [("deep_embed", 4), ("ollama_no_key", 6), ("hostile_schema", 3), ("deep_show", 2), ("many_tools", 3),
               ("big_stops", 3), ("scored_choices", 3)]

    MIX = [("good_completion", 30), ("good_chat_stream", 15), ("bad_request", 15), ("too_long", 2),
           ("wrong_route", 8), ("wrong_type_or_key", 8), ("abandoned_stream", 8), ("abandoned_whole", 8),
           ("idle_and_partial", 6)]

    def worker(self, seed):
        rng = random.Random(seed)
        mix = self.MIX + (self.HOSTILE if self.hostile else [])
        names = [n for n, _ in mix]
        weights = [w for _, w in mix]
        while not self.stop.is_set():
            name = rng.choices(names, weights)[0]
            try:
                getattr(self, name)(rng)
            except (OSError, http.client.HTTPException) as e:
                with self.lock:
                    self.errors[(name, type(e).__name__)] += 1

    def run(self):
        ts = [threading.Thread(target=self.worker, args=(self.rng.random(),), daemon=True) for _ in range(self.threads)]
        for t in ts:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        for t in ts:
            t.join(120)


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k.split("{")[0] if "model_name" in k and k.count("=") == 1 else k] = float(v)
    return out


GAUGES = ["kvasir:num_requests_running", "kvasir:num_requests_waiting", "kvasir:kv_cache_usage_perc",
          "kvasir:http_requests_in_flight", "kvasir:http_connections"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("-m", "--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--warmup", type=float, default=0.15, help="fraction of the run before the RSS baseline")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--extra", default="", help="more flags for kvasir serve")
    ap.add_argument("--hostile", action="store_true", help="add the hostile mix (see above)")
    a = ap.parse_args()

    port = free_port()
    cmd = [a.bin, "serve", "-m", a.model, "--port", str(port), "--api-key", KEY, "--kv-mem", "256M",
           "--max-model-len", "2048", "--max-seqs", "16", *a.extra.split()]
    log = open(f"/tmp/kvasir-soak-{port}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if metrics(port).get("kvasir:model_loaded") == 1:
                    break
            except OSError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                sys.exit("kvasir serve did not start")
            time.sleep(0.1)
        start_rss, start_fds = proc_sample(proc.pid)
        samples = []
        soak = Soak(port, a.seconds, a.threads, a.seed, a.hostile)
        t0 = time.time()
        sampler_stop = threading.Event()

        def sampler():
            while not sampler_stop.is_set():
                rss, fds = proc_sample(proc.pid)
                samples.append((time.time() - t0, rss, fds))
                sampler_stop.wait(1.0)

        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        soak.run()
        # Quiescence: every gauge back to 0 (the sampler keeps going).
        settle0 = time.time()
        m = metrics(port)
        while time.time() - settle0 < 60:
            m = metrics(port)
            if all(m.get(g, 0) <= (1 if g == "kvasir:http_connections" else 0) for g in GAUGES):
                break
            time.sleep(0.5)
        time.sleep(2)
        sampler_stop.set()
        st.join()
        end_rss, end_fds = proc_sample(proc.pid)
        warm = [s for s in samples if s[0] >= a.warmup * a.seconds]
        base_rss = warm[0][1] if warm else start_rss
        peak_rss = max(s[1] for s in samples)
        total = sum(soak.counts.values())
        result = {
            "seconds": a.seconds, "threads": a.threads, "requests": total,
            "rss_start_mb": start_rss / 2**20, "rss_after_warmup_mb": base_rss / 2**20,
            "rss_peak_mb": peak_rss / 2**20, "rss_end_mb": end_rss / 2**20,
            "rss_growth_after_warmup_pct": 100.0 * (end_rss - base_rss) / base_rss,
            "fds_start": start_fds, "fds_peak": max(s[2] for s in samples), "fds_end": end_fds,
            "gauges_end": {g: m.get(g) for g in GAUGES},
            "by_kind_status": {f"{k} {s}": n for (k, s), n in sorted(soak.counts.items())},
            "unexpected": {f"{k} {s}": n for (k, s), n in sorted(soak.errors.items())},
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed"
        log.close()
    result["exit_code"] = code
    print("| figure | value |\n|---|---:|")
    for k in ["seconds", "threads", "requests", "rss_start_mb", "rss_after_warmup_mb", "rss_peak_mb", "rss_end_mb",
              "rss_growth_after_warmup_pct", "fds_start", "fds_peak", "fds_end", "exit_code"]:
        v = result[k]
        print(f"| {k} | {v:.1f} |" if isinstance(v, float) else f"| {k} | {v} |")
    print("gauges at the end:", json.dumps(result["gauges_end"]))
    print("answers:", json.dumps(result["by_kind_status"]))
    print("unexpected:", json.dumps(result["unexpected"]) if result["unexpected"] else "none")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))
    ok = (not result["unexpected"] and result["rss_growth_after_warmup_pct"] <= 5.0 and code == 0 and
          all((v or 0) <= (1 if g == "kvasir:http_connections" else 0) for g, v in result["gauges_end"].items()))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
