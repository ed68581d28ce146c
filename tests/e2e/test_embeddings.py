"""Embeddings with the clients people use, unmodified: the openai client (which asks for base64 by
default), floats, token-id input, LangChain's OpenAIEmbeddings, Ollama's /api/embed; the vectors
equal `kvasir embed`'s for the same model and are batched without changing a bit."""
import base64
import json
import math
import struct
import subprocess

import ollama
import openai
import pytest

from conftest import API_KEY, BIN, STORIES

TEXTS = ["Once upon a time there was a cat.", "The dog ran to the park.", "Lily liked red apples."]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_openai_client_embeddings(client, model_id, server):
    r = client.embeddings.create(model=model_id, input=TEXTS)  # the client sends encoding_format base64
    assert [d.index for d in r.data] == [0, 1, 2] and r.model == model_id
    vecs = [d.embedding for d in r.data]
    assert all(len(v) == 64 and norm(v) == pytest.approx(1.0, abs=1e-5) for v in vecs)
    assert vecs[0] != vecs[1]
    status, f = server.json("POST", "/v1/embeddings", {"input": TEXTS, "encoding_format": "float"})
    assert status == 200
    for got, want in zip(vecs, (d["embedding"] for d in f["data"])):
        assert got == pytest.approx(want, abs=1e-7)
    status, b = server.json("POST", "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
    raw = base64.b64decode(b["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(f["data"][0]["embedding"], abs=0)
    # One at a time equals batched; token ids equal the text they encode.
    single = client.embeddings.create(model=model_id, input=TEXTS[1], encoding_format="float").data[0].embedding
    assert single == pytest.approx(vecs[1], abs=1e-7)
    _, tok = server.json("POST", "/tokenize", {"prompt": TEXTS[2]})
    by_ids = client.embeddings.create(model=model_id, input=[tok["tokens"]], encoding_format="float").data[0].embedding
    assert by_ids == pytest.approx(vecs[2], abs=1e-7)
    assert r.usage.prompt_tokens == r.usage.total_tokens > 3 * 3


def test_kvasir_embed_prints_the_same_vectors(client, model_id):
    out = subprocess.run([BIN, "embed", "-m", str(STORIES), "-t", "1", *sum((["--text", t] for t in TEXTS), [])],
                         capture_output=True, text=True, check=True)
    cli = [json.loads(line) for line in out.stdout.splitlines()]
    served = client.embeddings.create(model=model_id, input=TEXTS, encoding_format="float").data
    assert len(cli) == 3
    for a, b in zip(cli, served):
        assert a == pytest.approx(b.embedding, abs=1e-6)


def test_bad_embedding_requests(client, model_id, server):
    for body, param in (({"input": ""}, "input"), ({"input": []}, "input"), ({"input": "x", "dimensions": 16}, "dimensions"),
                        ({"input": "x", "encoding_format": "int8"}, "encoding_format"), ({"input": "x", "truncate": 5}, "truncate"),
                        ({"input": [[1, 10**7]]}, "input"), ({"input": "word " * 5000}, "input")):
        status, err = server.json("POST", "/v1/embeddings", body)
        assert status == 400, (body, err)
        assert err["error"]["param"] == param, (body, err)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="other-model", input="x")


def test_langchain_openai_embeddings(server, model_id):
    lc = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: LangChain would otherwise split texts with OpenAI's own
    # tokenizer (tiktoken) and send its token ids, which mean nothing to another vocabulary.
    emb = lc.OpenAIEmbeddings(base_url=server.base_url + "/v1", api_key=server.api_key, model=model_id,
                              check_embedding_ctx_length=False, max_retries=0)
    docs = emb.embed_documents(TEXTS)
    query = emb.embed_query(TEXTS[0])
    assert len(docs) == 3 and len(docs[0]) == 64
    assert query == pytest.approx(docs[0], abs=1e-6)
    # The nearest document to a text is itself.
    dots = [sum(a * b for a, b in zip(query, d)) for d in docs]
    assert max(range(3), key=lambda i: dots[i]) == 0


def test_ollama_embed(server, client, model_id):
    oc = ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"})
    r = oc.embed(model="stories260K", input=TEXTS)
    want = client.embeddings.create(model=model_id, input=TEXTS, encoding_format="float").data
    assert len(r.embeddings) == 3
    for a, b in zip(r.embeddings, want):
        assert list(a) == pytest.approx(b.embedding, abs=1e-6)
    assert r.prompt_eval_count > 0
    legacy = oc.embeddings(model="stories260K", prompt=TEXTS[0])
    assert list(legacy.embedding) == pytest.approx(want[0].embedding, abs=1e-6)
    # Ollama truncates to the context by default, and refuses with truncate false.
    long = "word " * 5000
    assert len(oc.embed(model="stories260K", input=long).embeddings[0]) == 64
    with pytest.raises(ollama.ResponseError):
        oc.embed(model="stories260K", input=long, truncate=False)


def test_rerank_and_score(server, model_id):
    """/v1/rerank (and llama-server's /rerank) and vLLM's /v1/score rank by the cosine similarity of
    the same embeddings /v1/embeddings returns: the query's own text ranks first with score ~1, every
    score equals the dot product of the two unit vectors, top_n and return_documents hold, and bad
    requests are 400s naming the field."""
    query = "The little dog ran to the park."
    docs = ["Numbers and tables of prices.", query, {"text": "A cat slept in the sun."}, "The dog ran."]
    plain = [d if isinstance(d, str) else d["text"] for d in docs]
    _, emb = server.json("POST", "/v1/embeddings", {"input": [query] + plain, "encoding_format": "float"})
    vecs = [d["embedding"] for d in emb["data"]]
    want = [sum(a * b for a, b in zip(vecs[0], v)) for v in vecs[1:]]
    for path in ("/v1/rerank", "/rerank"):
        status, r = server.json("POST", path, {"model": model_id, "query": query, "documents": docs, "top_n": 3,
                                               "return_documents": True})
        assert status == 200, r
        res = r["results"]
        assert len(res) == 3 and res[0]["index"] == 1 and res[0]["relevance_score"] == pytest.approx(1.0, abs=1e-4)
        assert res[0]["document"]["text"] == query
        assert [x["relevance_score"] for x in res] == sorted((x["relevance_score"] for x in res), reverse=True)
        for x in res:
            assert x["relevance_score"] == pytest.approx(want[x["index"]], abs=1e-5)
        assert r["usage"]["total_tokens"] > 0
    status, s = server.json("POST", "/v1/score", {"text_1": query, "text_2": plain})
    assert status == 200 and [d["index"] for d in s["data"]] == [0, 1, 2, 3]
    assert [d["score"] for d in s["data"]] == pytest.approx(want, abs=1e-5)
    status, pairs = server.json("POST", "/v1/score", {"text_1": [query, plain[0]], "text_2": [plain[1], plain[0]]})
    assert status == 200 and all(d["score"] == pytest.approx(1.0, abs=1e-4) for d in pairs["data"])
    for path, body, param in (("/v1/rerank", {"documents": plain}, "query"),
                              ("/v1/rerank", {"query": "q", "documents": []}, "documents"),
                              ("/v1/rerank", {"query": "q", "documents": ["a"] * 3000}, "documents"),
                              ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
                              ("/v1/rerank", {"query": "q", "documents": ["a"], "rank_fields": ["x"]}, "rank_fields"),
                              ("/v1/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_1"),
                              ("/v1/score", {"text_1": "a", "text_2": [""]}, "text_2")):
        status, e = server.json("POST", path, body)
        assert status == 400 and e["error"]["param"] == param, (path, body, e)
