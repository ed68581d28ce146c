"""LoRA adapters through the API, as vLLM serves them: `serve --lora NAME=FILE`, requests select an
adapter by "model", adapters mix in one batch, /v1/models lists them, and (with
--allow-runtime-lora) /v1/load_lora_adapter and /v1/unload_lora_adapter change them at run time.
The adapters are written by `kvasir synth-lora`; the reference for an adapter's output is the
same adapter merged into the weights (`kvasir export-lora`) and served as a plain model."""
import subprocess
import threading

import pytest

from conftest import BIN, STORIES, Server

PROMPTS = ["Once upon a time", "Lily saw a big", "The dog"]


def adapter(tmp_path, seed, rank=8):
    path = tmp_path / f"lora{seed}.gguf"
    subprocess.run([BIN, "synth-lora", "-m", str(STORIES), "-o", str(path), "--rank", str(rank), "--alpha", "16",
                    "--seed", str(seed)], check=True, capture_output=True)
    return path


def greedy(client, model, prompt, n=24):
    r = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    return r.choices[0].text


@pytest.fixture(scope="module")
def lora_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora")
    a, b = adapter(tmp, 1), adapter(tmp, 2, rank=4)
    s = Server(STORIES, extra=["--lora", f"tiny-a={a}", "--allow-runtime-lora", "--kv-mem", "32M"], log_name="lora")
    yield s, tmp, a, b
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def test_an_adapter_answers_as_its_merged_weights(lora_env):
    s, tmp, a, _ = lora_env
    merged = tmp / "merged.gguf"
    subprocess.run([BIN, "export-lora", "-m", str(STORIES), "--lora", str(a), "-o", str(merged)], check=True,
                   capture_output=True)
    ref = Server(merged, extra=["--kv-mem", "32M"], log_name="lora-merged")
    try:
        want = [greedy(ref.client(), "merged", p) for p in PROMPTS]
    finally:
        assert ref.stop() == 0
    c = s.client()
    got = [greedy(c, "tiny-a", p) for p in PROMPTS]
    base = [greedy(c, "stories260K", p) for p in PROMPTS]
    assert got == want
    assert got != base  # the adapter is what made the difference


def test_requests_on_different_adapters_share_batches(lora_env):
    s, _, _, _ = lora_env
    c = s.client()
    alone = {(m, p): greedy(c, m, p) for m in ("tiny-a", "stories260K") for p in PROMPTS}
    results, errors = {}, []

    def run(m, p, i):
        try:
            results[(m, p, i)] = greedy(c, m, p)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m, p, i)) for i in range(3) for m in ("tiny-a", "stories260K")
               for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (m, p, _), text in results.items():
        assert text == alone[(m, p)], (m, p)


def test_models_lists_adapters_and_unknown_names_are_404(lora_env):
    s, _, a, _ = lora_env
    status, body = s.json("GET", "/v1/models")
    assert status == 200
    ids = {m["id"]: m for m in body["data"]}
    assert ids["tiny-a"]["parent"] == "stories260K" and ids["tiny-a"]["root"] == str(a)
    status, body = s.json("POST", "/v1/completions", {"model": "tiny-z", "prompt": "x", "max_tokens": 1})
    assert status == 404 and body["error"]["code"] == "model_not_found" and "tiny-a" in body["error"]["message"]


def test_load_use_and_unload_at_run_time(lora_env):
    s, _, _, b = lora_env
    c = s.client()
    status, _, text = s.request("POST", "/v1/load_lora_adapter", {"lora_name": "tiny-b", "lora_path": str(b)})
    assert status == 200 and b"tiny-b" in text
    out_b = greedy(c, "tiny-b", PROMPTS[0])
    assert out_b != greedy(c, "tiny-a", PROMPTS[0]) and out_b != greedy(c, "stories260K", PROMPTS[0])
    # A taken name, a missing file, a file that is not an adapter: 400s naming what is wrong.
    status, body = s.json("POST", "/v1/load_lora_adapter", {"lora_name": "tiny-b", "lora_path": str(b)})
    assert status == 400 and "already loaded" in body["error"]["message"]
    status, body = s.json("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/nonexistent.gguf"})
    assert status == 400 and body["error"]["param"] == "lora_path"
    status, body = s.json("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(STORIES)})
    assert status == 400 and "not an adapter" in body["error"]["message"]
    status, body = s.json("POST", "/v1/load_lora_adapter", {"lora_name": "stories260K", "lora_path": str(b)})
    assert status == 400 and "base model" in body["error"]["message"]
    status, body = s.json("POST", "/v1/load_lora_adapter", {"lora_name": "y", "lora_path": str(b), "rank": 3})
    assert status == 400 and body["error"]["param"] == "rank"
    status, _, _ = s.request("POST", "/v1/unload_lora_adapter", {"lora_name": "tiny-b"})
    assert status == 200
    status, body = s.json("POST", "/v1/completions", {"model": "tiny-b", "prompt": "x", "max_tokens": 1})
    assert status == 404
    status, body = s.json("POST", "/v1/unload_lora_adapter", {"lora_name": "tiny-b"})
    assert status == 404 and body["error"]["code"] == "lora_not_found"


def test_an_adapter_never_reuses_the_base_models_prefix_cache(lora_env):
    s, _, _, _ = lora_env
    c = s.client()
    prompt = "One day a little girl named Lily went to the park with her mom and saw a big red ball " * 3
    def cached(model):
        r = c.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
        d = r.usage.prompt_tokens_details
        return d.cached_tokens if d else 0
    cached("stories260K")
    assert cached("stories260K") > 0  # the base model's own second request hits
    assert cached("tiny-a") == 0      # the adapter computes its own KV
    assert cached("tiny-a") > 0


def test_ollama_chat_and_generate_select_adapters(lora_env):
    s, _, _, _ = lora_env
    status, body = s.json("POST", "/api/generate", {"model": "tiny-a", "prompt": PROMPTS[0], "stream": False, "raw": True,
                                                     "options": {"temperature": 0, "num_predict": 24, "repeat_penalty": 1.0}})
    assert status == 200, body
    assert body["response"] == greedy(s.client(), "tiny-a", PROMPTS[0])
    status, body = s.json("POST", "/api/generate", {"model": "tiny-q", "prompt": "x", "stream": False})
    assert status == 404 and "tiny-q" in body["error"]


def test_runtime_loading_is_off_by_default(server):
    status, body = server.json("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(STORIES)})
    assert status == 403 and "--allow-runtime-lora" in body["error"]["message"]
