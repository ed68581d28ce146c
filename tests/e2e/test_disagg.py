"""Prefill/decode disaggregation end to end: a prefill instance, a decode instance and a router as
separate processes on loopback, each started and stopped here. Outputs are compared with one
colocated instance; faults (a prefill instance killed or frozen, a connection cut, a decode instance
killed mid-stream, a router restart) must end each request within one timeout, with every KV block
free on both sides afterwards (/metrics)."""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import API_KEY, BIN, GEMMA, SHARED, STORIES, Server, free_port, wait_for

TIMEOUT_MS = 3000  # --kv-transfer-timeout of the decode instances here
BLOCKS_USED = "kvasir:kv_cache_blocks_used"


def long_prompt(n_words=120, seed=0):
    words = ["river", "stone", "lantern", "garden", "winter", "harbor", "violet", "meadow", "copper", "silent"]
    return "Once upon a time " + " ".join(words[(i * 7 + seed) % len(words)] for i in range(n_words)) + ". Then"


class Router:
    def __init__(self, prefill=(), decode=(), backend=(), port=None, extra=()):
        self.port = port or free_port()
        args = [BIN, "router", "--port", str(self.port), "--api-key", API_KEY, "--health-interval", "200", *extra]
        for flag, urls in (("--prefill", prefill), ("--decode", decode), ("--backend", backend)):
            for u in urls:
                args += [flag, u]
        self.log_path = Path(os.environ.get("KVASIR_E2E_LOGS", "/tmp")) / f"kvasir-e2e-router-{self.port}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        # The router's admission and error shapes are the server's: reuse the raw client.
        self.api_key = API_KEY
        self.host = "127.0.0.1"
        self.request = Server.request.__get__(self)
        self.json = Server.json.__get__(self)
        self.metrics = Server.metrics.__get__(self)
        self.client = Server.client.__get__(self)
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("router not healthy: " + self.log_path.read_text())

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.log.close()
        return self.proc.returncode



def blocks_free(*servers):
    for s in servers:
        assert wait_for(lambda: s.metrics()[BLOCKS_USED] == 0), (s.log_path, s.metrics())


def decode_args(timeout_ms=TIMEOUT_MS):
    return ["--role", "decode", "--kv-listen", "127.0.0.1:0", "--kv-transfer-timeout", str(timeout_ms),
            "--disagg-min-tokens", "16"]


def complete(target, prompt, n=24, **kw):
    status, body = target.json("POST", "/v1/completions",
                               {"prompt": prompt, "max_tokens": n, "temperature": 0, **kw})
    assert status == 200, body
    return body["choices"][0]["text"]


@pytest.fixture(scope="module")
def stories_cluster():
    if not STORIES.exists():
        pytest.skip("needs the shared models")
    common = ["--max-seqs", "48", "--kv-mem", "64M"]
    single = Server(STORIES, extra=common, log_name="dis-single")
    prefill = Server(STORIES, extra=[*common, "--role", "prefill"], log_name="dis-prefill")
    decode = Server(STORIES, extra=[*common, *decode_args()], log_name="dis-decode")
    router = Router(prefill=[prefill.base_url], decode=[decode.base_url])
    yield single, prefill, decode, router
    assert router.stop() == 0
    for s in (single, prefill, decode):
        assert s.stop() == 0, s.log_path.read_text()[-2000:]


def test_greedy_output_is_one_instances(stories_cluster):
    single, prefill, decode, router = stories_cluster
    before = decode.metrics()
    for seed in range(3):
        prompt = long_prompt(60, seed)
        assert complete(router, prompt) == complete(single, prompt)
    after = decode.metrics()
    # The KV did come over (else this would only test recomputation).
    assert after["kvasir:kv_pull_done_total"] - before["kvasir:kv_pull_done_total"] == 3, after
    assert after["kvasir:kv_pull_blocks_total"] > before["kvasir:kv_pull_blocks_total"]
    assert prefill.metrics()["kvasir:kv_push_done_total"] >= 3
    assert router.metrics()["kvasir_router_prefill_assigned_total"] >= 3
    blocks_free(prefill, decode)


def test_seeded_sampling_is_one_instances(stories_cluster):
    single, _, _, router = stories_cluster
    prompt = long_prompt(50, 7)
    a = complete(router, prompt, temperature=0.9, seed=1234)
    b = complete(single, prompt, temperature=0.9, seed=1234)
    assert a == b


def test_32_concurrent_streams(stories_cluster):
    single, prefill, decode, router = stories_cluster
    prompts = [long_prompt(40 + i % 5, i) for i in range(32)]
    expected = [complete(single, p, n=12) for p in prompts]

    def stream(p):
        c = router.client()
        return "".join(ch.choices[0].text for ch in
                       c.completions.create(model="stories260K", prompt=p, max_tokens=12,
                                            temperature=0, stream=True))

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        got = list(pool.map(stream, prompts))
    assert got == expected
    blocks_free(prefill, decode)


def test_second_turn_hits_the_decode_prefix_cache(stories_cluster):
    _, _, decode, router = stories_cluster
    first = long_prompt(70, 3)
    text = complete(router, first, n=8)
    before = decode.metrics()
    complete(router, first + text + " and then", n=8)
    after = decode.metrics()
    hit = after["kvasir:prefix_cache_hits_total"] - before["kvasir:prefix_cache_hits_total"]
    assert hit >= 64, (before, after)  # the first turn's blocks were here (imported, then extended)


def test_router_front(stories_cluster):
    _, _, _, router = stories_cluster
    assert router.request("POST", "/v1/completions", {"prompt": "x"}, auth=False)[0] == 401
    status, body = router.json("GET", "/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["stories260K"]
    status, body = router.json("POST", "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 2})
    assert status == 404 and "stories260K" in body["error"]["message"]
    status, body = router.json("POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert status == 200, body


def test_internal_prefill_route_refuses_hostile_bodies(stories_cluster):
    single, prefill, _, _ = stories_cluster
    body = {"transfer_id": 1, "tokens": [1, 2, 3], "skip_blocks": 0, "kv_format": "x", "target_host": "127.0.0.1",
            "target_port": 1}
    assert prefill.request("POST", "/internal/kv/prefill", body, auth=False)[0] == 401
    status, err = prefill.json("POST", "/internal/kv/prefill", {**body, "tokens": [1, -5]})
    assert status == 400 and "tokens" in err["error"]["message"]
    status, err = prefill.json("POST", "/internal/kv/prefill", {**body, "tokens": [10 ** 6]})
    assert status == 400 and "vocabulary" in err["error"]["message"]
    status, err = prefill.json("POST", "/internal/kv/prefill", body)  # another KV format: refused, naming both
    assert status == 400 and "KV formats differ" in err["error"]["message"]
    assert single.json("POST", "/internal/kv/prefill", body)[0] == 404  # not a prefill instance
    assert prefill.metrics()[BLOCKS_USED] == 0


def test_mismatched_models_are_refused_and_the_answer_stays_right():
    q8 = SHARED / "models" / "stories260K-q8_0.gguf"
    if not STORIES.exists() or not q8.exists():
        pytest.skip("needs the shared models")
    prefill = Server(q8, extra=["--role", "prefill"], log_name="dis-mm-prefill")
    decode = Server(STORIES, extra=decode_args(), log_name="dis-mm-decode")
    single = Server(STORIES, log_name="dis-mm-single")
    try:
        prompt = long_prompt(60, 1)
        status, _, body = decode.request("POST", "/v1/completions",
                                         {"prompt": prompt, "max_tokens": 16, "temperature": 0},
                                         headers={"X-Kvasir-Prefill": prefill.base_url})
        assert status == 200
        assert json.loads(body)["choices"][0]["text"] == complete(single, prompt, n=16)
        m = decode.metrics()
        assert m["kvasir:kv_pull_failed_total"] == 1 and m["kvasir:kv_pull_done_total"] == 0, m
        # The refusal names both formats (each starts with the model's identity).
        assert "KV formats differ" in decode.log_path.read_text()
        blocks_free(prefill, decode)
    finally:
        for s in (prefill, decode, single):
            s.stop()


def test_prefill_instance_peers_are_checked():
    if not STORIES.exists():
        pytest.skip("needs the shared models")
    decode = Server(STORIES, extra=[*decode_args(), "--prefill-peer", "http://127.0.0.1:1"], log_name="dis-peer")
    try:
        status, _, _ = decode.request("POST", "/v1/completions",
                                      {"prompt": long_prompt(40), "max_tokens": 4, "temperature": 0},
                                      headers={"X-Kvasir-Prefill": "http://169.254.169.254:80"})
        assert status == 200  # computed here; the named instance was never asked
        assert decode.metrics()["kvasir:kv_pull_failed_total"] == 1
    finally:
        decode.stop()


class CuttingProxy:
    """A TCP proxy that forwards a connection's request and then cuts it before any answer."""

    def __init__(self, target_port):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.target_port = target_port
        self.cuts = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.target_port))
            conn.settimeout(2)
            try:
                up.sendall(conn.recv(1 << 20))
            except OSError:
                pass
            time.sleep(0.1)
            self.cuts += 1
            conn.close()
            up.close()


def test_faults_end_within_one_timeout():
    if not STORIES.exists():
        pytest.skip("needs the shared models")
    single = Server(STORIES, log_name="dis-f-single")
    prefill = Server(STORIES, extra=["--role", "prefill"], log_name="dis-f-prefill")
    decode = Server(STORIES, extra=decode_args(), log_name="dis-f-decode")
    proxy = CuttingProxy(prefill.port)
    try:
        def via(prefill_url, prompt):
            t0 = time.time()
            status, _, body = decode.request("POST", "/v1/completions",
                                             {"prompt": prompt, "max_tokens": 12, "temperature": 0},
                                             headers={"X-Kvasir-Prefill": prefill_url})
            assert status == 200, body
            return json.loads(body)["choices"][0]["text"], time.time() - t0

        # A connection cut by a proxy: the pull fails at once, the prompt is computed here.
        prompt = long_prompt(60, 11)
        text, took = via(f"http://127.0.0.1:{proxy.port}", prompt)
        assert text == complete(single, prompt, n=12) and took < TIMEOUT_MS / 1000 + 2
        assert proxy.cuts >= 1 and decode.metrics()["kvasir:kv_pull_failed_total"] >= 1

        # A transfer slower than its deadline: the prefill instance frozen (SIGSTOP).
        prefill.proc.send_signal(signal.SIGSTOP)
        prompt = long_prompt(60, 12)
        text, took = via(prefill.base_url, prompt)
        assert text == complete(single, prompt, n=12)
        assert TIMEOUT_MS / 1000 - 0.5 < took < TIMEOUT_MS / 1000 + 2, took
        m = decode.metrics()
        assert m["kvasir:kv_pull_expired_total"] + m["kvasir:kv_pull_failed_total"] >= 2, m

        # The prefill instance killed (-9): refused at once from then on.
        prefill.proc.send_signal(signal.SIGKILL)
        prefill.proc.wait()
        prompt = long_prompt(60, 13)
        text, took = via(prefill.base_url, prompt)
        assert text == complete(single, prompt, n=12) and took < TIMEOUT_MS / 1000 + 2
        blocks_free(decode)
    finally:
        proxy.sock.close()
        for s in (single, prefill, decode):
            s.stop()


def test_prefill_killed_mid_pull():
    """kill -9 of the prefill instance while the decode instance waits on it (the prefill of a long
    prompt; the few milliseconds of the UCX transfer itself are hit in tests/disagg's sender-dies
    case): the decode side frees what it reserved and computes the prompt within one timeout."""
    if not GEMMA.exists():
        pytest.skip("needs the default model (make model)")
    prefill = Server(GEMMA, extra=["--role", "prefill"], log_name="dis-k-prefill")
    decode = Server(GEMMA, extra=decode_args(timeout_ms=8000), log_name="dis-k-decode")
    try:
        prompt = long_prompt(700, 5)  # ~1,000 tokens: seconds of prefill on two cores
        result = {}

        def run():
            t0 = time.time()
            result["r"] = decode.request("POST", "/v1/completions",
                                         {"prompt": prompt, "max_tokens": 4, "temperature": 0},
                                         headers={"X-Kvasir-Prefill": prefill.base_url}, timeout=60)
            result["took"] = time.time() - t0

        t = threading.Thread(target=run)
        t.start()
        assert wait_for(lambda: decode.metrics()[BLOCKS_USED] > 0, timeout=5)  # reserved: the pull is on
        time.sleep(0.3)
        prefill.proc.send_signal(signal.SIGKILL)
        t.join(60)
        assert result["r"][0] == 200, result
        assert result["took"] < 8 + 30  # the pull ended at once; the rest is computing the prompt here
        m = decode.metrics()
        assert m["kvasir:kv_pull_failed_total"] + m["kvasir:kv_pull_expired_total"] == 1, m
        assert m["kvasir:kv_pull_done_total"] == 0
        blocks_free(decode)
    finally:
        prefill.stop()
        decode.stop()


def test_decode_killed_mid_stream_and_router_restart():
    if not STORIES.exists():
        pytest.skip("needs the shared models")
    a = Server(STORIES, log_name="dis-r-a")
    b = Server(STORIES, log_name="dis-r-b")
    router = Router(backend=[a.base_url, b.base_url])
    try:
        c = router.client()
        # Find which instance a long stream lands on, then kill it mid-stream.
        t0 = time.time()
        stream = c.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=1800,
                                      temperature=0, stream=True, extra_body={"ignore_eos": True})
        next(iter(stream))
        busy = a if a.metrics()["kvasir:num_requests_running"] == 1 else b
        other = b if busy is a else a
        busy.proc.send_signal(signal.SIGKILL)
        with pytest.raises(Exception):
            for _ in stream:
                pass
        assert time.time() - t0 < 10
        # The next request is placed on the instance that lives, though health checks have not run.
        assert complete(router, "Once upon a time", n=8) == complete(other, "Once upon a time", n=8)
        port = router.port
        assert router.stop(signal.SIGKILL) is not None
        router = Router(backend=[a.base_url, b.base_url], port=port)
        assert complete(router, "Once upon a time", n=8) == complete(other, "Once upon a time", n=8)
        m = router.metrics()
        assert m[f'kvasir_router_instance_healthy{{instance="{busy.base_url}",role="both"}}'] == 0
        blocks_free(other)
    finally:
        router.stop()
        a.stop()
        b.stop()


@pytest.fixture
def netns():
    """A network namespace joined to this one by a veth pair: (name, address there, address here).
    Skipped where namespaces cannot be created (no root or no CAP_NET_ADMIN)."""
    name = f"kvasir-e2e-{os.getpid()}"
    here_if, there_if = f"kvh{os.getpid() % 100000}", f"kvn{os.getpid() % 100000}"
    subnet = f"10.213.{os.getpid() % 250}"
    there, here = f"{subnet}.1", f"{subnet}.2"
    setup = [["ip", "netns", "add", name],
             ["ip", "link", "add", here_if, "type", "veth", "peer", "name", there_if],
             ["ip", "link", "set", there_if, "netns", name],
             ["ip", "addr", "add", f"{here}/30", "dev", here_if],
             ["ip", "link", "set", here_if, "up"],
             ["ip", "netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", there_if],
             ["ip", "netns", "exec", name, "ip", "link", "set", there_if, "up"],
             ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
    for cmd in setup:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            subprocess.run(["ip", "link", "del", here_if], capture_output=True)
            pytest.skip(f"cannot create a network namespace joined by veth ({' '.join(cmd)}: {r.stderr.strip()})")
    yield name, there, here
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", here_if], capture_output=True)


def test_between_network_namespaces(netns):
    """The prefill instance in its own network namespace, reached over a veth pair (a second host,
    as far as the network stack knows): KV crosses it and the output is one instance's."""
    if not STORIES.exists():
        pytest.skip("needs the shared models")
    name, there, here = netns
    prefill = Server(STORIES, extra=["--role", "prefill"], log_name="dis-ns-prefill", host=there,
                     launcher=("ip", "netns", "exec", name))
    decode = Server(STORIES, extra=["--role", "decode", "--kv-listen", f"{here}:0", "--disagg-min-tokens", "16",
                                    "--kv-transfer-timeout", str(TIMEOUT_MS)], log_name="dis-ns-decode")
    single = Server(STORIES, log_name="dis-ns-single")
    router = Router(prefill=[prefill.base_url], decode=[decode.base_url])
    try:
        for seed in range(3):
            prompt = long_prompt(60, 20 + seed)
            assert complete(router, prompt) == complete(single, prompt)
        m = decode.metrics()
        assert m["kvasir:kv_pull_done_total"] == 3 and m["kvasir:kv_pull_failed_total"] == 0, m
        blocks_free(prefill, decode)
    finally:
        router.stop()
        for s in (prefill, decode, single):
            s.stop()


def test_router_serves_several_models_from_one_endpoint():
    """Colocated instances of different models behind one router: each request goes to the
    instance serving its model, /v1/models lists both, an unknown model is a 404 naming them."""
    q8 = SHARED / "models" / "stories260K-q8_0.gguf"
    if not STORIES.exists() or not q8.exists():
        pytest.skip("needs the shared models")
    a = Server(STORIES, extra=["--served-model-name", "tiny-f32"], log_name="dis-mm-a")
    b = Server(q8, extra=["--served-model-name", "tiny-q8"], log_name="dis-mm-b")
    router = Router(backend=[a.base_url, b.base_url])
    try:
        status, body = router.json("GET", "/v1/models")
        assert status == 200 and sorted(m["id"] for m in body["data"]) == ["tiny-f32", "tiny-q8"]
        for name, direct in (("tiny-f32", a), ("tiny-q8", b)):
            prompt = long_prompt(20, 3)
            via = complete(router, prompt, n=12, model=name)
            assert via == complete(direct, prompt, n=12, model=name)
        # Each instance ran exactly the requests for its model (two each: via the router, direct).
        for s in (a, b):
            assert s.metrics()['kvasir:request_success_total{finished_reason="length"}'] == 2
        status, body = router.json("POST", "/v1/completions", {"model": "tiny-f16", "prompt": "x", "max_tokens": 2})
        assert status == 404 and "tiny-f32" in body["error"]["message"] and "tiny-q8" in body["error"]["message"]
    finally:
        router.stop()
        a.stop()
        b.stop()
