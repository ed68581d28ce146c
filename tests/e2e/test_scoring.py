"""Prompt scoring through the OpenAI API as evaluators use it (lm-eval-harness's loglikelihood
requests: echo + logprobs + max_tokens 0), vLLM's prompt_logprobs, and the same numbers as
`kvasir perplexity` computes on the same text."""
import json
import math
import subprocess

import pytest

from conftest import BIN, STORIES

TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
        "One day, she saw a big tree in the park. The tree had many red apples. Lily wanted an apple, "
        "but the tree was too tall. She asked her friend Tom to help her. Tom was a strong boy. He climbed "
        "the tree and picked two apples, one for Lily and one for him. They sat under the tree and ate the "
        "apples together. The apples were sweet and juicy. Lily said thank you to Tom, and they played "
        "until the sun went down. Then they went home, happy and tired, and dreamed of apples. ") * 2


def tokenize(server, text, special=True):
    status, r = server.json("POST", "/tokenize", {"prompt": text, "add_special_tokens": special})
    assert status == 200
    return r["tokens"]


def test_echo_logprobs_score_the_prompt(client, model_id, server):
    prompt = TEXT[:200]
    ids = tokenize(server, prompt)
    r = client.completions.create(model=model_id, prompt=prompt, echo=True, logprobs=2, max_tokens=0)
    c = r.choices[0]
    assert c.text == prompt and c.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(ids)
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing predicts the first token
    assert all(v <= 0 for v in lp.token_logprobs[1:])
    for k in range(1, len(ids)):
        top = lp.top_logprobs[k]
        assert 1 <= len(top) <= 2 and max(top.values()) >= lp.token_logprobs[k] - 1e-6
    assert lp.text_offset == sorted(lp.text_offset)
    # With an answer: the prompt's entries, then the answer's, which equal a plain request's.
    plain = client.completions.create(model=model_id, prompt=prompt, logprobs=2, max_tokens=4, temperature=0)
    both = client.completions.create(model=model_id, prompt=prompt, echo=True, logprobs=2, max_tokens=4, temperature=0)
    b = both.choices[0]
    assert b.text == prompt + plain.choices[0].text
    assert b.logprobs.token_logprobs[:len(ids)] == lp.token_logprobs
    assert b.logprobs.tokens[len(ids):] == plain.choices[0].logprobs.tokens
    assert b.logprobs.token_logprobs[len(ids):] == pytest.approx(plain.choices[0].logprobs.token_logprobs, abs=1e-6)
    assert b.logprobs.text_offset[len(ids)] == len(prompt)


def test_streamed_echo_carries_the_prompt_logprobs(client, model_id):
    prompt = TEXT[:120]
    whole = client.completions.create(model=model_id, prompt=prompt, echo=True, logprobs=1, max_tokens=5, temperature=0)
    chunks = list(client.completions.create(model=model_id, prompt=prompt, echo=True, logprobs=1, max_tokens=5,
                                            temperature=0, stream=True))
    assert chunks[0].choices[0].text == prompt
    text = "".join(c.choices[0].text for c in chunks)
    lps = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.token_logprobs]
    assert text == whole.choices[0].text
    assert lps[0] is None and lps[1:] == pytest.approx(whole.choices[0].logprobs.token_logprobs[1:], abs=1e-6)


def test_vllm_prompt_logprobs(client, model_id, server):
    prompt = TEXT[:150]
    ids = tokenize(server, prompt)
    echo = client.completions.create(model=model_id, prompt=prompt, echo=True, logprobs=0, max_tokens=0)
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=1, temperature=0,
                                  extra_body={"prompt_logprobs": 3})
    pl = r.choices[0].model_extra["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    for k in range(1, len(ids)):
        entry = pl[k]
        mine = entry[str(ids[k])]
        assert mine["logprob"] == pytest.approx(echo.choices[0].logprobs.token_logprobs[k], abs=1e-6)
        assert mine["rank"] >= 1 and isinstance(mine["decoded_token"], str)
        # vLLM's shape: the 3 most likely tokens, plus the prompt's token when it is not among them.
        top = sorted(entry.values(), key=lambda v: v["rank"])
        if mine["rank"] <= 3:
            assert len(entry) == 3
        else:
            assert len(entry) == 4 and top[-1] is mine
        assert [v["rank"] for v in top[:3]] == [1, 2, 3]
        assert all(a["logprob"] >= b["logprob"] for a, b in zip(top, top[1:]))
    # Chat: at the top level of the response, over the rendered prompt.
    chat = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hello there"}],
                                          max_tokens=0, extra_body={"prompt_logprobs": 0})
    cp = chat.model_extra["prompt_logprobs"]
    assert cp[0] is None and len(cp) == chat.usage.prompt_tokens and all(len(e) == 1 for e in cp[1:])
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 0


def test_max_tokens_zero_needs_something_to_score(client, model_id):
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt="x", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"


def test_loglikelihood_requests_reproduce_kvasir_perplexity(server, tmp_path):
    # llama.cpp's method, done by a client: chunks of n tokens with BOS first, the second half of
    # each chunk scored, each chunk one echo request with token ids; the perplexity must be what
    # `kvasir perplexity` prints for the same text (the engine's batched rows vs the tool's
    # sequential session: equal up to float rounding of the log-softmax).
    n_ctx = 64
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    out = subprocess.run([BIN, "perplexity", "-m", str(STORIES), "-f", str(path), "-c", str(n_ctx), "--json", "-t", "1"],
                         capture_output=True, text=True, check=True)
    ref = json.loads(out.stdout)
    ids = tokenize(server, TEXT)  # as the tool tokenizes: BOS first
    bos = tokenize(server, "", special=True)[0]
    total, count = 0.0, 0
    for c in range(len(ids) // n_ctx):
        chunk = [bos] + ids[c * n_ctx + 1:(c + 1) * n_ctx]
        status, r = server.json("POST", "/v1/completions",
                                {"prompt": chunk, "echo": True, "logprobs": 0, "max_tokens": 0})
        assert status == 200, r
        lps = r["choices"][0]["logprobs"]["token_logprobs"]
        assert len(lps) == n_ctx
        for k in range(n_ctx // 2 + 1, n_ctx):
            total -= lps[k]
            count += 1
    assert count == ref["scored"]
    assert math.exp(total / count) == pytest.approx(ref["ppl"], rel=1e-5)
