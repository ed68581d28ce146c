"""`kvasir serve` driven by the real OpenAI Python client (and raw HTTP where a client would
hide the details): completions, chat, streaming, usage, stop strings, seeds, n > 1, logprobs,
64 concurrent streams, aborts that free the KV cache, exact 4xx codes, drain on SIGTERM, the load
generator and the web page."""
import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import API_KEY, BIN, GEMMA, MAX_BODY, SHARED, STORIES, Server, wait_for

PROMPT = "Once upon a time"
# stories260K's greedy continuation (llama2.c's own sample, and llama.cpp's golden).
GREEDY = ", there was a little girl named Lily"


def completion(client, model_id, **kw):
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.completions.create(model=model_id, **kw)


# ---- info endpoints ---------------------------------------------------------------------------


def test_health_models_and_page(server, client, model_id):
    assert server.json("GET", "/health", auth=False) == (200, {"status": "ok"})
    assert model_id == "stories260K"
    models = client.models.list().data
    assert len(models) == 1 and models[0].owned_by == "kvasir"
    status, headers, body = server.request("GET", "/", auth=False)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"/v1/chat/completions" in body
    one = client.models.retrieve(model_id)
    assert one.id == model_id and one.owned_by == "kvasir"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    status, headers, _ = server.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 1},
                                        headers={"X-Request-Id": "req-42"})
    assert status == 200 and headers["X-Request-Id"] == "req-42"


def test_tokenize_detokenize(server, model_id):
    status, tok = server.json("POST", "/tokenize", {"model": model_id, "prompt": PROMPT, "return_token_strs": True})
    assert status == 200
    assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"])
    assert tok["tokens"][0] == 1  # BOS
    assert tok["max_model_len"] > 0
    status, no_bos = server.json("POST", "/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
    assert no_bos["tokens"] == tok["tokens"][1:]
    status, detok = server.json("POST", "/detokenize", {"tokens": no_bos["tokens"]})
    assert status == 200 and detok["prompt"] == PROMPT
    status, err = server.json("POST", "/detokenize", {"tokens": [1, 10**6]})
    assert status == 400 and err["error"]["param"] == "tokens"


# ---- completions ------------------------------------------------------------------------------


def test_completion_greedy_and_usage(server, client, model_id):
    r = completion(client, model_id)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    choice = r.choices[0]
    assert choice.text.startswith(GREEDY), choice.text
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 24
    assert r.usage.prompt_tokens == 5  # BOS + 4 tokens
    assert r.usage.total_tokens == 29
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    # Token-id prompts are taken as they are.
    ids = server.json("POST", "/tokenize", {"prompt": PROMPT})[1]["tokens"]
    same = completion(client, model_id, prompt=ids)
    assert same.choices[0].text == choice.text


def test_completion_stream_matches_whole(client, model_id):
    whole = completion(client, model_id).choices[0].text
    chunks = list(completion(client, model_id, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_ends_with_done(server, model_id):
    status, headers, body = server.request(
        "POST", "/v1/completions", {"model": model_id, "prompt": PROMPT, "max_tokens": 4, "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in body.decode().split("\n\n") if not e.startswith(":")]  # keep-alive comments
    assert events[-2] == "data: [DONE]" and events[-1] == ""
    assert all(e.startswith("data: ") for e in events[:-1])


def test_stop_strings(client, model_id):
    full = completion(client, model_id, max_tokens=40).choices[0].text
    assert "Lily" in full
    r = completion(client, model_id, max_tokens=40, stop=["Lily"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[: full.index("Lily")]
    streamed = "".join(c.choices[0].text for c in completion(client, model_id, max_tokens=40, stop="Lily", stream=True))
    assert streamed == r.choices[0].text


def test_seed_reproducibility(client, model_id):
    kw = dict(temperature=1.0, max_tokens=32, seed=1234)
    a = completion(client, model_id, **kw).choices[0].text
    b = completion(client, model_id, **kw).choices[0].text
    assert a == b
    others = {completion(client, model_id, **{**kw, "seed": s}).choices[0].text for s in (1, 2, 3)}
    assert len(others | {a}) > 1


def test_n_choices_use_consecutive_seeds(client, model_id):
    r = completion(client, model_id, n=3, temperature=1.0, max_tokens=20, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for j, c in enumerate(r.choices):
        single = completion(client, model_id, temperature=1.0, max_tokens=20, seed=7 + j).choices[0].text
        assert c.text == single
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 60
    streamed = {}
    for c in completion(client, model_id, n=3, temperature=1.0, max_tokens=20, seed=7, stream=True):
        for ch in c.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
    assert streamed == {c.index: c.text for c in r.choices}


def test_completion_logprobs(client, model_id):
    r = completion(client, model_id, max_tokens=8, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0
        assert 1 <= len(top) <= 4
        assert abs(max(top.values()) - chosen) < 1e-4  # greedy picks the likeliest
    assert lp.text_offset[0] == 0


def test_logit_bias_and_ignore_eos(client, model_id, server):
    # Forbid the greedy first token: the continuation must change.
    first = server.json("POST", "/tokenize", {"prompt": ",", "add_special_tokens": False})[1]["tokens"][-1]
    r = completion(client, model_id, max_tokens=4, logit_bias={str(first): -100})
    assert not r.choices[0].text.startswith(",")
    long = completion(client, model_id, max_tokens=300, extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 300 and long.choices[0].finish_reason == "length"


# ---- chat -------------------------------------------------------------------------------------


MESSAGES = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}]


def test_chat_completion(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=16, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].message.content
    assert r.usage.completion_tokens <= 16 and r.usage.prompt_tokens > 10
    r2 = client.chat.completions.create(model=model_id, messages=MESSAGES, max_completion_tokens=16, temperature=0)
    assert r2.choices[0].message.content == r.choices[0].message.content


def test_chat_stream_and_logprobs(client, model_id):
    whole = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=12, temperature=0,
                                           logprobs=True, top_logprobs=2)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    assert "".join(t.token for t in content) == whole.choices[0].message.content
    chunks = list(client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} is not installed (make model)")
def test_gemma_chat_template():
    # The installed Gemma 3 270M GGUF is the base model and ships no chat template: the server picks
    # Gemma's built-in turn format by itself (never ChatML, whose markers Gemma's vocabulary would
    # split into text), says so at start-up, and a file or a built-in name still overrides it.
    s = Server(GEMMA, extra=["--max-seqs", "4", "--kv-mem", "64M", "--max-model-len", "1024"], api_key=None,
               log_name="gemma")
    try:
        assert "chat template: built-in gemma (the model has none)" in s.log_path.read_text()
        status, tok = s.json("POST", "/tokenize", {"messages": [{"role": "system", "content": "Be brief."},
                                                                {"role": "user", "content": "Hi"}],
                                                   "return_token_strs": True})
        assert status == 200
        # Exactly one <bos>: the template writes it, so the tokenizer must not add another.
        assert tok["token_strs"][:4] == ["<bos>", "<start_of_turn>", "user", "\n"]
        assert tok["token_strs"][-3:] == ["<start_of_turn>", "model", "\n"]
        assert "<|im_start|>" not in "".join(tok["token_strs"]) and "<start_of_turn>" in tok["token_strs"]
        r = s.client().chat.completions.create(model="gemma-3-270m-q4_k_m", max_tokens=8, temperature=0,
                                               messages=[{"role": "user", "content": "Hi"}])
        assert r.choices[0].message.content and r.usage.completion_tokens <= 8
        assert "<end_of_turn>" not in r.choices[0].message.content and "<|im" not in r.choices[0].message.content
    finally:
        assert s.stop() == 0
    template = SHARED / "templates" / "google-gemma-2-2b-it.jinja"
    for override, origin in ((str(template), "given file"), ("chatml", "built-in chatml (requested)")):
        s = Server(GEMMA, extra=["--max-seqs", "2", "--kv-mem", "32M", "--max-model-len", "512", "--chat-template",
                                 override], api_key=None, log_name="gemma-override")
        try:
            assert f"chat template: {origin}" in s.log_path.read_text()
            status, tok = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi"}],
                                                       "return_token_strs": True})
            assert status == 200 and tok["count"] > 3
        finally:
            assert s.stop() == 0


@pytest.mark.skipif(not GEMMA.exists(), reason=f"{GEMMA} is not installed (make model)")
def test_chat_stream_first_chunk_comes_with_the_first_token():
    # Benchmark clients take the first chunk with choices as the first token: it must not go out
    # before the prefill is done. A prompt that takes a while to prefill (prefix caching off by
    # using a fresh prompt each time), streamed: the first choices chunk carries the role and the
    # first token's text, and arrives no earlier than a same-size prompt's whole 1-token request
    # (Gemma 3 270M: ~0.5 s of prefill here, so an early role chunk cannot pass).
    import random
    rng = random.Random(5)
    words = ["little", "girl", "dog", "park", "tree", "sun", "ball", "happy", "mom", "cat", "red", "big"]

    def prompt():
        return " ".join(rng.choice(words) for _ in range(400))

    server = Server(GEMMA, extra=["--max-seqs", "2", "--kv-mem", "64M", "--max-model-len", "1024"],
                    log_name="gemma-ttft")
    try:
        check_first_chunk(server, prompt)
    finally:
        assert server.stop() == 0


def check_first_chunk(server, prompt):
    t0 = time.time()
    status, data = server.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt()}],
                                                                 "max_tokens": 1, "temperature": 0})
    assert status == 200, data
    prefill_s = time.time() - t0
    body = json.dumps({"messages": [{"role": "user", "content": prompt()}], "max_tokens": 4, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json",
                                                        "Authorization": f"Bearer {server.api_key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = None
    while first is None:
        line = resp.fp.readline().decode()
        assert line, "stream ended without a chunk"
        if line.startswith("data: ") and line.strip() != "data: [DONE]":
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                first = (time.time() - t0, chunk)
    conn.close()
    elapsed, chunk = first
    delta = chunk["choices"][0]["delta"]
    assert delta["role"] == "assistant" and "content" in delta
    assert elapsed >= 0.5 * prefill_s, (elapsed, prefill_s)


def test_unsupported_fields_are_refused(client, model_id):
    # A field that would change the output, which the server does not implement, is a 400 naming
    # it: the client never believes it got what it asked for. Metadata fields are accepted.
    for kind, extra in (("completion", {"best_of": 2}), ("completion", {"suffix": "x"}),
                        ("completion", {"guided_regex": "a+"}), ("chat", {"guided_json": {"type": "object"}}),
                        ("chat", {"functions": [{"name": "f"}]}), ("chat", {"structured_outputs": {}})):
        with pytest.raises(openai.BadRequestError) as e:
            if kind == "completion":
                client.completions.create(model=model_id, prompt=PROMPT, max_tokens=2, extra_body=extra)
            else:
                client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=2, extra_body=extra)
        assert e.value.body["param"] == next(iter(extra)) and e.value.body["code"] == "unsupported_field"
    r = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=2, user="u", store=False,
                                       metadata={"team": "e2e"})
    assert r.choices[0].finish_reason in ("length", "stop")


# ---- concurrency and aborts -------------------------------------------------------------------


def test_64_concurrent_streams(client, model_id):
    def one(i):
        chunks = completion(client, model_id, max_tokens=32, temperature=0.8, seed=i, stream=True,
                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, usage = "", None
        for c in chunks:
            if c.choices:
                text += c.choices[0].text
            if c.usage:
                usage = c.usage
        return text, usage

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    assert len(results) == 64
    for text, usage in results:
        assert usage.completion_tokens == 32 and text


def test_tpot_target_holds_prefill_and_keeps_outputs():
    # A target no step can meet: while one request decodes, the others wait (admission stops
    # where one more sequence would miss the target; a progress chunk every 256 held steps), yet
    # every request completes with exactly the text it gets alone.
    s = Server(STORIES, extra=["--max-seqs", "8", "--tpot-target", "0.001"], api_key=None, log_name="tpot")
    try:
        c = s.client()

        def one(_):
            r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=200, temperature=0,
                                     extra_body={"ignore_eos": True})
            return r.choices[0].text

        first = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=200, temperature=0,
                                     stream=True, extra_body={"ignore_eos": True})
        text = next(iter(first)).choices[0].text  # decoding now: its steps are measured
        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            others = pool.map(one, range(7))
            text += "".join(ch.choices[0].text for ch in first)
            others = list(others)
        assert text.startswith(GREEDY) and others == [text] * 7
        assert s.metrics()["kvasir:prefill_held_steps_total"] > 0
    finally:
        s.stop()



def test_aborted_streams_free_kv(server, client, model_id):
    before = server.metrics().get('kvasir:request_success_total{finished_reason="abort"}', 0)
    streams = [completion(client, model_id, max_tokens=1500, temperature=1.0, seed=i, stream=True,
                          extra_body={"ignore_eos": True}) for i in range(8)]
    for s in streams:
        for k, _ in enumerate(s):
            if k == 3:
                break
    assert server.metrics()["kvasir:kv_cache_usage_perc"] > 0
    for s in streams:
        s.close()  # hang up mid-stream
    assert wait_for(lambda: server.metrics()["kvasir:num_requests_running"] == 0), server.metrics()
    assert wait_for(lambda: server.metrics()["kvasir:kv_cache_usage_perc"] == 0), server.metrics()
    m = server.metrics()
    assert m['kvasir:request_success_total{finished_reason="abort"}'] >= before + 8
    assert completion(client, model_id).choices[0].text.startswith(GREEDY)


def test_queued_stream_of_a_vanished_client_is_freed():
    """With one running slot, a second stream waits in the queue; its client hangs up before any
    token. The server notices through its keep-alive comments and drops the queued request, long
    before the running one ends."""
    s = Server(GEMMA, extra=["--max-seqs", "1", "--kv-mem", "64M", "--max-model-len", "4096"], log_name="queued")
    try:
        model_id = s.json("GET", "/v1/models")[1]["data"][0]["id"]
        body = {"model": model_id, "prompt": PROMPT, "max_tokens": 3000, "stream": True, "ignore_eos": True,
                "temperature": 1.0}
        headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
        running = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        running.request("POST", "/v1/completions", json.dumps(body), headers)
        r = running.getresponse()
        assert r.status == 200
        r.read1(64)  # it is generating
        queued = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        queued.request("POST", "/v1/completions", json.dumps(body), headers)
        assert wait_for(lambda: s.metrics()["kvasir:num_requests_waiting"] == 1), s.metrics()
        queued.close()  # hang up while still queued
        assert wait_for(lambda: s.metrics()["kvasir:num_requests_waiting"] == 0, timeout=10), s.metrics()
        assert s.metrics()["kvasir:num_requests_running"] == 1  # the first stream is unaffected
        running.close()
        assert wait_for(lambda: s.metrics()["kvasir:kv_cache_usage_perc"] == 0), s.metrics()
    finally:
        assert s.stop() == 0


# ---- errors -----------------------------------------------------------------------------------


def expect_error(server, path, body, status, param=None, code=None, **kw):
    got, data = server.json("POST", path, body, **kw)
    assert got == status, data
    err = data["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if status < 500:
        assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    return err


def test_bad_requests(server, model_id):
    status, _, body = server.request("POST", "/v1/completions", b'{"prompt": "x",', {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_json"
    expect_error(server, "/v1/completions", [1, 2], 400, code="invalid_json")
    expect_error(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": "10"}, 400, "max_tokens")
    expect_error(server, "/v1/completions", {"prompt": PROMPT, "temperature": 7}, 400, "temperature")
    expect_error(server, "/v1/completions", {"prompt": PROMPT, "n": 0}, 400, "n")
    expect_error(server, "/v1/completions", {"prompt": PROMPT, "stop": [1, 2]}, 400, "stop")
    expect_error(server, "/v1/completions", {"prompt": PROMPT, "logit_bias": {"99999": 5}}, 400, "logit_bias")
    expect_error(server, "/v1/completions", {"prompt": [1, 999999]}, 400, "prompt")
    expect_error(server, "/v1/chat/completions", {"messages": "hi"}, 400, "messages")
    expect_error(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400,
                 "messages[0].content")
    expect_error(server, "/v1/completions", {"model": "gpt-4", "prompt": PROMPT}, 404, "model", "model_not_found")
    status, _, body = server.request("GET", "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_context_length_exceeded(server, client, model_id):
    max_len = server.json("POST", "/tokenize", {"prompt": "x"})[1]["max_model_len"]
    long_prompt = " ".join(["little girl"] * max_len)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=long_prompt, max_tokens=4)
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": long_prompt}])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=PROMPT, max_tokens=max_len)
    assert e.value.code == "context_length_exceeded" and e.value.param == "max_tokens"


def test_body_too_large(server):
    body = json.dumps({"prompt": "x" * (MAX_BODY + 10)})
    status, _, data = server.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    assert status == 413
    assert json.loads(data)["error"]["code"] == "request_too_large"


def test_authentication(server, model_id):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
        status, _, data = server.request("POST", "/v1/completions", {"prompt": PROMPT}, headers, auth=False)
        assert status == 401, headers
        assert json.loads(data)["error"]["code"] == "invalid_api_key"
    status, _, _ = server.request("GET", "/v1/models", auth=False)
    assert status == 401
    status, _, _ = server.request("POST", "/tokenize", {"prompt": "x"}, auth=False)
    assert status == 401
    wrong = openai.OpenAI(base_url=server.base_url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=model_id, prompt=PROMPT, max_tokens=2)
    # Health stays open for probes; metrics need the key unless --metrics-public.
    assert server.request("GET", "/health", auth=False)[0] == 200
    assert server.request("GET", "/metrics", auth=False)[0] == 401
    assert server.request("GET", "/metrics")[0] == 200


def test_still_serving_after_errors(client, model_id):
    assert completion(client, model_id).choices[0].text.startswith(GREEDY)


# ---- metrics ----------------------------------------------------------------------------------


def test_metrics(server, client, model_id):
    completion(client, model_id, max_tokens=8)
    m = server.metrics()
    for name in ("kvasir:num_requests_running", "kvasir:num_requests_waiting", "kvasir:kv_cache_usage_perc",
                 "kvasir:prefix_cache_queries_total", "kvasir:prefix_cache_hits_total", "kvasir:prompt_tokens_total",
                 "kvasir:generation_tokens_total", "kvasir:num_preemptions_total",
                 "kvasir:time_to_first_token_seconds_count", "kvasir:inter_token_latency_seconds_count",
                 "kvasir:e2e_request_latency_seconds_count", "kvasir:request_queue_time_seconds_count"):
        assert name in m, name
    assert m["kvasir:generation_tokens_total"] > 0
    assert m["kvasir:e2e_request_latency_seconds_count"] > 0
    assert any(k.startswith("kvasir:time_to_first_token_by_length_seconds_count{input_len=\"1-512\"") for k in m)
    # The same prompt again: its full blocks come from the prefix cache.
    same = "The little girl named Lily went to the park. " * 8
    completion(client, model_id, prompt=same, max_tokens=2)
    r = completion(client, model_id, prompt=same, max_tokens=2)
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    assert server.metrics()["kvasir:prefix_cache_hits_total"] > 0


# ---- load generator ---------------------------------------------------------------------------


def test_loadgen(server, tmp_path):
    out = tmp_path / "result.json"
    svg = tmp_path / "svg"
    cmd = [BIN, "loadgen", "--url", server.base_url, "--api-key", API_KEY, "--concurrency", "1,4,8",
           "--num-prompts", "12", "--input-len", "log:4:64", "--output-len", "log:2:32", "--result-json", str(out),
           "--svg-dir", str(svg), "--detailed", "--warmup", "1"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| load | ok | fail | req/s | out tok/s |" in run.stdout
    doc = json.loads(out.read_text())
    assert [r["max_concurrency"] for r in doc["runs"]] == [1, 4, 8]
    for r in doc["runs"]:
        assert r["completed"] == 12 and r["failed"] == 0
        for key in ("request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                    "mean_tpot_ms", "p90_itl_ms", "p99_e2el_ms"):
            assert key in r, key
        # ignore_eos fixes output lengths at max_tokens, and prompts have exact token lengths.
        assert all(2 <= n <= 32 for n in r["output_lens"])
        assert all(4 <= n <= 64 for n in r["input_lens"])
        assert r["total_output_tokens"] == sum(r["output_lens"])
    for name in ("ttft_heatmap.svg", "tpot_heatmap.svg", "throughput_p99.svg"):
        text = (svg / name).read_text()
        assert text.startswith("<svg") and text.rstrip().endswith("</svg>")
    assert "(knee)" in (svg / "throughput_p99.svg").read_text()

    rate = subprocess.run([BIN, "loadgen", "--url", server.base_url, "--api-key", API_KEY, "--rate", "20,inf",
                           "--burstiness", "0.5", "--num-prompts", "10", "--input-len", "16", "--output-len", "8",
                           "--dataset", "shared-prefix", "--prefix-len", "32", "--warmup", "0"],
                          capture_output=True, text=True, timeout=120)
    assert rate.returncode == 0, rate.stderr
    assert "| rate=20 | 10 | 0 |" in rate.stdout and "| rate=inf | 10 | 0 |" in rate.stdout

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Once upon a time", "output_len": 5}\n\n'
                       '{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 7}\n')
    out = tmp_path / "chat.json"
    chat = subprocess.run([BIN, "loadgen", "--url", server.base_url + "/v1", "--api-key", API_KEY, "--endpoint", "chat",
                           "--dataset", "jsonl", "--prompt-file", str(prompts), "--concurrency", "2",
                           "--num-prompts", "4", "--warmup", "0", "--detailed", "--result-json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert chat.returncode == 0, chat.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["completed"] == 4 and run["output_lens"] == [5, 7, 5, 7]


# ---- shutdown ---------------------------------------------------------------------------------


def test_sigterm_drains_in_flight_requests():
    s = Server(STORIES, extra=["--max-seqs", "8"], api_key=None, log_name="drain")
    c = s.client()
    got = {}

    def stream():
        text, finish = "", None
        for ch in c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=1900, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True}):
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
            got.setdefault("first", time.time())
        got["text"], got["finish"] = text, finish

    t = threading.Thread(target=stream)
    t.start()
    assert wait_for(lambda: "first" in got, 30)
    s.proc.send_signal(15)
    # While draining, new work is refused and health says so (until the listener closes). The
    # signal is handled asynchronously, so first wait until health reports the drain. 1,900 tokens
    # keep the stream going for far longer than that takes: the checks run while it is in flight.
    assert wait_for(lambda: s.request("GET", "/health")[0] == 503, 30)
    status, data = s.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert status == 503 and data["error"]["code"] == "shutting_down"
    assert t.is_alive(), "the stream ended before the drain could be checked"
    t.join(60)
    assert got["finish"] == "length" and got["text"].startswith(GREEDY)
    assert s.proc.wait(60) == 0
    s.log.close()


# ---- browser ----------------------------------------------------------------------------------


def chromium_paths():
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return browser, driver


@pytest.mark.skipif(None in chromium_paths(), reason="chromium and chromedriver are not installed "
                    "(apt-get install chromium chromium-driver)")
def test_web_page_streams_a_reply(server):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError as e:
        pytest.skip(f"selenium is not importable: {e}")
    browser, driver_path = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    except Exception as e:  # no display libraries, sandbox refused, ...
        pytest.skip(f"chromium cannot start here: {str(e).splitlines()[0]}")
    try:
        driver.get(server.base_url + "/")
        driver.find_element(By.ID, "key").send_keys(API_KEY)
        driver.execute_script("document.getElementById('key').dispatchEvent(new Event('change'))")
        driver.find_element(By.ID, "max_tokens").clear()
        driver.find_element(By.ID, "max_tokens").send_keys("40")
        driver.find_element(By.ID, "input").send_keys("Tell me a story.")
        driver.find_element(By.ID, "send").click()
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
                   and d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text.strip())
        wait.until(lambda d: "tokens/s" in d.find_element(By.ID, "stats").text
                   and d.find_element(By.ID, "send").is_enabled())
        reply = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text
        assert reply.strip()
        assert "tokens/s" in driver.find_element(By.ID, "stats").text
        assert not driver.find_elements(By.CSS_SELECTOR, ".msg.error")
    finally:
        driver.quit()
