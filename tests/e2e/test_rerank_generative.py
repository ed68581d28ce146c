"""serve --rerank generative: /v1/rerank and /v1/score read the model as a cross-encoder (Qwen3-Reranker's
way): score = p(yes) / (p(yes) + p(no)) at the answer's first token of a judging prompt. Checked
against the same probabilities computed another way: the prompt rendered by /tokenize, then "yes" and
"no" appended and scored as prompt tokens through /v1/completions (echo + logprobs)."""
import math

import pytest

from conftest import GEMMA, Server

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
          'Note that the answer can only be "yes" or "no".')
INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"
QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital and largest city of France.", "Bananas are yellow and rich in potassium.",
        "The Eiffel Tower stands in Paris."]


@pytest.fixture(scope="module")
def gemma():
    if not GEMMA.exists():
        pytest.skip("needs the default model (make model)")
    s = Server(GEMMA, extra=["--rerank", "generative", "--kv-mem", "256M"], log_name="rerank-generative")
    yield s
    assert s.stop() == 0


def expected_score(s, doc):
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"<Instruct>: {INSTRUCT}\n<Query>: {QUERY}\n<Document>: {doc}"}]
    status, t = s.json("POST", "/tokenize", {"messages": messages, "add_generation_prompt": True})
    assert status == 200, t
    ids = t["tokens"]

    def first_id(word):
        return s.json("POST", "/tokenize", {"prompt": word, "add_special_tokens": False})[1]["tokens"][0]

    def lp(token):
        status, r = s.json("POST", "/v1/completions", {"prompt": ids + [token], "max_tokens": 0, "echo": True, "logprobs": 0})
        assert status == 200, r
        return r["choices"][0]["logprobs"]["token_logprobs"][-1]

    return 1 / (1 + math.exp(lp(first_id("no")) - lp(first_id("yes"))))


def test_rerank_is_p_yes_against_no(gemma):
    status, r = gemma.json("POST", "/v1/rerank", {"query": QUERY, "documents": DOCS})
    assert status == 200, r
    scores = {x["index"]: x["relevance_score"] for x in r["results"]}
    assert sorted(scores) == [0, 1, 2]
    ordered = [x["relevance_score"] for x in r["results"]]
    assert ordered == sorted(ordered, reverse=True)
    for i, doc in enumerate(DOCS):
        assert 0 < scores[i] < 1
        assert abs(scores[i] - expected_score(gemma, doc)) < 2e-3, i
    assert r["usage"]["prompt_tokens"] > 3 * 40
    status, sc = gemma.json("POST", "/v1/score", {"text_1": QUERY, "text_2": DOCS})
    assert status == 200, sc
    assert all(abs(d["score"] - scores[d["index"]]) < 1e-6 for d in sc["data"])
