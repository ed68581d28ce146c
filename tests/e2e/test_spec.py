"""`kvasir serve --spec ngram`: greedy answers are the same as without speculation, streaming or
not; the spec counters move; a request can opt out with "speculative": false."""
from conftest import STORIES, Server

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside. Once upon a time,"


def test_ngram_speculation_keeps_greedy_answers():
    plain = Server(STORIES, extra=["--kv-mem", "64M"], log_name="nospec")
    spec = Server(STORIES, extra=["--kv-mem", "64M", "--spec", "ngram", "--spec-k", "4", "--no-spec-auto"],
                  log_name="spec")
    try:
        body = {"prompt": PROMPT, "max_tokens": 48, "temperature": 0}
        _, want = plain.json("POST", "/v1/completions", body)
        _, got = spec.json("POST", "/v1/completions", body)
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
        m = spec.metrics()
        assert m["kvasir:spec_decode_num_draft_tokens_total"] > 0
        assert m["kvasir:spec_decode_num_accepted_tokens_total"] > 0
        # Streamed, the same text.
        text = "".join(c.choices[0].text for c in spec.client().completions.create(
            model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0, stream=True))
        assert text == want["choices"][0]["text"]
        # Opting out: no drafts for this request.
        before = spec.metrics()["kvasir:spec_decode_num_draft_tokens_total"]
        _, out = spec.json("POST", "/v1/completions", {**body, "speculative": False})
        assert out["choices"][0]["text"] == want["choices"][0]["text"]
        assert spec.metrics()["kvasir:spec_decode_num_draft_tokens_total"] == before
        assert plain.metrics()["kvasir:spec_decode_num_draft_tokens_total"] == 0
    finally:
        assert plain.stop() == 0
        assert spec.stop() == 0
