"""llama-server's own routes as its clients use them: POST /completion (whole and SSE-streamed, with
n_probs and return_tokens), GET /props, GET /slots; refused fields named."""
import json

from conftest import Server


def completion(server, **body):
    status, data = server.json("POST", "/completion", body)
    assert status == 200, data
    return data


def test_completion_matches_the_openai_route(server, client, model_id):
    want = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=8, temperature=0)
    r = completion(server, prompt="Once upon a time", n_predict=8, temperature=0, n_probs=3, return_tokens=True,
                   cache_prompt=True, samplers=["top_k"], mirostat=0, typical_p=1.0)
    assert r["content"] == want.choices[0].text
    assert r["stop"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 8
    assert r["tokens_evaluated"] == want.usage.prompt_tokens
    assert len(r["tokens"]) == 8
    probs = r["completion_probabilities"]
    assert [p["id"] for p in probs] == r["tokens"]
    for p in probs:
        assert len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["id"] == p["id"]  # greedy: the top one
        assert p["logprob"] <= 0 and bytes(p["bytes"]).decode(errors="replace") == p["token"]
    assert r["timings"]["predicted_n"] == 8 and r["timings"]["prompt_n"] == r["tokens_evaluated"]
    # Token ids as the prompt, a stop word, and the end of text.
    ids = server.json("POST", "/tokenize", {"prompt": "Once upon a time"})[1]["tokens"]
    assert completion(server, prompt=ids, n_predict=8, temperature=0)["content"] == want.choices[0].text
    first = want.choices[0].text.split()[0]
    r = completion(server, prompt="Once upon a time", n_predict=8, temperature=0, stop=[first])
    assert r["stop_type"] == "word" and first not in r["content"]


def test_completion_streams_sse(server):
    whole = completion(server, prompt="Lily saw", n_predict=10, temperature=0)
    conn_status, headers, body = server.request("POST", "/completion",
                                                 {"prompt": "Lily saw", "n_predict": 10, "temperature": 0, "stream": True})
    assert conn_status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and all(not e["stop"] for e in events[:-1])
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["timings"]["predicted_n"] == 10


def test_props_and_slots(server):
    status, props = server.json("GET", "/props")
    assert status == 200 and props["total_slots"] == 64  # serve --max-seqs 64 in conftest
    assert props["default_generation_settings"]["n_ctx"] > 0 and "/" not in props["model_path"]
    status, slots = server.json("GET", "/slots")
    assert status == 200 and len(slots) == 64 and {s["id"] for s in slots} == set(range(64))


def test_unsupported_fields_are_named(server):
    for body, field in [({"prompt": "x", "mirostat": 2}, "mirostat"), ({"prompt": "x", "typical_p": 0.5}, "typical_p"),
                        ({"prompt": "x", "image_data": []}, "image_data"), ({"n_predict": 3}, "prompt"),
                        ({"prompt": "x", "n_probs": 99}, "n_probs")]:
        status, data = server.json("POST", "/completion", body)
        assert status == 400 and data["error"]["param"] == field, (body, data)


def test_iteration_tokens_histogram(server):
    before = server.metrics()
    completion(server, prompt="One day", n_predict=5, temperature=0)
    after = server.metrics()
    steps = after["kvasir:iteration_tokens_total_count"] - before.get("kvasir:iteration_tokens_total_count", 0)
    rows = after["kvasir:iteration_tokens_total_sum"] - before.get("kvasir:iteration_tokens_total_sum", 0)
    assert steps >= 5 and rows >= steps + 1  # a prompt step of several rows, then one row per token
    assert after['kvasir:iteration_tokens_total_bucket{le="1"}'] >= before.get('kvasir:iteration_tokens_total_bucket{le="1"}', 0) + 4
