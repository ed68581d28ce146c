"""serve --kv-disk: a restarted server answers a long prompt from the blocks its predecessor wrote
(cached_tokens counts them, the greedy answer is the cold one), /metrics reports the tier, and a
disk that goes away costs recomputation, never an error to the client."""
import shutil

from conftest import STORIES, Server

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
    finally:
        assert cold.stop() == 0
    args = ["--kv-mem", "32M", "--kv-disk", str(tmp_path / "kv"), "--kv-disk-size", "64M"]
    first = Server(STORIES, extra=args, log_name="kvdisk-1")
    try:
        text, cached = ask(first)
        assert text == want and cached == 0
        m = first.metrics()
        assert m["kvasir:kv_disk_saved_blocks_total"] > 0
    finally:
        assert first.stop() == 0
    second = Server(STORIES, extra=args, log_name="kvdisk-2")
    try:
        text, cached = ask(second)
        assert text == want and cached > 0
        m = second.metrics()
        assert m["kvasir:kv_disk_loaded_blocks_total"] * 16 == cached
        assert m["kvasir:kv_disk_read_bytes_total"] > 0 and m["kvasir:kv_disk_stored_bytes"] > 0
        # The disk goes away: new blocks cannot be written, answers go on.
        shutil.rmtree(tmp_path / "kv")
        text, _ = ask(second, PROMPT + " The end.")
        assert text
        text, _ = ask(second, "A different story about a dog named Max. " * 6)
        assert text
        assert second.metrics()["kvasir:kv_disk_write_errors_total"] > 0
        assert "cannot write" in second.log_path.read_text()
    finally:
        assert second.stop() == 0
