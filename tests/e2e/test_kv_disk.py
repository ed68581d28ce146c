"""serve --kv-disk and --kv-store: a restarted server answers a long prompt from the blocks its predecessor wrote
(cached_tokens counts them, the greedy answer is the cold one), /metrics reports the tier, and a
disk that goes away costs recomputation, never an error to the client."""
import shutil
import time

import pytest

from conftest import STORIES, Server, wait_for

PROMPT = "Once upon a time there was a little girl named Lily who loved to play in the park. " * 8


def ask(s, prompt=PROMPT):
    status, r = s.json("POST", "/v1/completions", {"model": "stories260K", "prompt": prompt, "max_tokens": 16,
                                                   "temperature": 0})
    assert status == 200, r
    return r["choices"][0]["text"], (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def test_restart_warm_and_metrics(tmp_path):
    cold = Server(STORIES, extra=["--kv-mem", "32M"], log_name="kvdisk-cold")
    try:
        want, _ = ask(cold)
        status, health = cold.json("GET", "/health", auth=False)
        assert status == 200 and "kv_pool" not in health
    finally:
        assert cold.stop() == 0
    args = ["--kv-mem", "32M", "--kv-disk", str(tmp_path / "kv"), "--kv-disk-size", "64M"]
    first = Server(STORIES, extra=args, log_name="kvdisk-1")
    try:
        text, cached = ask(first)
        assert text == want and cached == 0
        m = first.metrics()
        assert m["kvasir:kv_tier_saved_blocks_total"] > 0
    finally:
        assert first.stop() == 0
    second = Server(STORIES, extra=args, log_name="kvdisk-2")
    try:
        text, cached = ask(second)
        assert text == want and cached > 0
        m = second.metrics()
        assert m['kvasir:kv_tier_loaded_blocks_total{tier="disk"}'] * 16 == cached
        assert m['kvasir:kv_tier_read_bytes_total{tier="disk"}'] > 0 and m['kvasir:kv_tier_stored_bytes{tier="disk"}'] > 0
        # The disk goes away: new blocks cannot be written, answers go on.
        shutil.rmtree(tmp_path / "kv")
        text, _ = ask(second, PROMPT + " The end.")
        assert text
        text, _ = ask(second, "A different story about a dog named Max. " * 6)
        assert text
        assert second.metrics()['kvasir:kv_tier_write_errors_total{tier="disk"}'] > 0
        assert "cannot write" in second.log_path.read_text()
    finally:
        assert second.stop() == 0


def start_redis(tmp_path):
    import shutil as sh
    import socket
    import subprocess
    import time
    if not sh.which("redis-server"):
        pytest.skip("needs redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.02)
    proc.kill()
    pytest.skip("redis-server did not start")


def test_two_instances_share_blocks_through_redis(tmp_path):
    redis, url = start_redis(tmp_path)
    a = b = None
    try:
        a = Server(STORIES, extra=["--kv-mem", "32M", "--kv-store", url], log_name="kvstore-a")
        b = Server(STORIES, extra=["--kv-mem", "32M", "--kv-store", url], log_name="kvstore-b")
        want, cached = ask(a)
        assert cached == 0
        # Both report the one pool in /health (what the router's placement compares); a server
        # without a store reports none.
        def pool(s):
            status, h = s.json("GET", "/health", auth=False)
            return h.get("kv_pool") if status == 200 else None
        assert wait_for(lambda: pool(a) and pool(a) == pool(b)), (pool(a), pool(b))
        for _ in range(50):  # the writes are asynchronous
            if a.metrics()['kvasir:kv_tier_written_blocks_total{tier="redis"}'] >= 8:
                break
            time.sleep(0.05)
        text, cached = ask(b)
        assert text == want and cached > 0
        assert b.metrics()['kvasir:kv_tier_loaded_blocks_total{tier="redis"}'] * 16 == cached
        # Another key's prompt on instance B finds nothing of it (the salt is in every hash).
        status, r = b.json("POST", "/v1/completions", {"model": "stories260K", "prompt": PROMPT, "max_tokens": 4,
                                                       "cache_salt": "someone-else"})
        assert status == 200 and not (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
        # The store goes down: both answer on, recomputing.
        redis.kill()
        redis.wait()
        text, cached = ask(b, PROMPT + " Again.")
        assert text
        text, _ = ask(a, "A dog named Max ran to the park. " * 6)
        assert text
        assert "unreachable" in b.log_path.read_text()
    finally:
        for s in (a, b):
            if s:
                assert s.stop() == 0
        if redis.poll() is None:
            redis.kill()
