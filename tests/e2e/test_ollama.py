"""Ollama's API with the official `ollama` Python client, unmodified: list, show, ps, chat and
generate, whole and streamed (NDJSON), Ollama's option names, and errors as Ollama's shape."""
import json

import ollama
import pytest

from conftest import API_KEY

MESSAGES = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}]
GREEDY = {"temperature": 0, "num_predict": 12, "seed": 3}


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"})


def test_list_show_ps_version(server, oc):
    models = oc.list().models
    assert len(models) == 1
    m = models[0]
    assert m.model == "stories260K:latest" and m.size > 0 and m.modified_at is not None
    assert m.details.format == "gguf" and m.details.family == "llama" and m.details.parameter_size.endswith("M")
    shown = oc.show("stories260K")
    assert shown.modelinfo["general.architecture"] == "llama" and shown.template
    assert oc.show("stories260K:latest").details.family == "llama"
    assert oc.ps().models[0].model == "stories260K:latest"
    status, body = server.json("GET", "/api/version")
    assert status == 200 and body["version"]


def test_chat_whole_and_streamed(oc):
    whole = oc.chat(model="stories260K", messages=MESSAGES, options=GREEDY)
    assert whole.done and whole.done_reason in ("stop", "length")
    assert whole.message.role == "assistant" and isinstance(whole.message.content, str)
    assert 0 < whole.eval_count <= 12 and whole.prompt_eval_count > 5
    assert whole.total_duration > 0 and whole.eval_duration >= 0
    parts = list(oc.chat(model="stories260K", messages=MESSAGES, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count


def test_generate_whole_and_streamed(oc):
    whole = oc.generate(model="stories260K:latest", prompt="Once upon a time", options=GREEDY)
    assert whole.done and whole.response and whole.eval_count <= 12
    parts = list(oc.generate(model="stories260K", prompt="Once upon a time", options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == whole.response
    # raw: the prompt as given, no template; it differs from the templated prompt's count.
    raw = oc.generate(model="stories260K", prompt="Once upon a time", raw=True, options=GREEDY)
    assert raw.prompt_eval_count < whole.prompt_eval_count
    # An empty prompt only loads the model.
    assert oc.generate(model="stories260K", prompt="").done_reason == "load"


def test_options_are_honoured(oc):
    a = oc.generate(model="stories260K", prompt="Once upon a time", options={"temperature": 1.0, "seed": 11,
                                                                              "num_predict": 24})
    b = oc.generate(model="stories260K", prompt="Once upon a time", options={"temperature": 1.0, "seed": 11,
                                                                              "num_predict": 24})
    assert a.response == b.response  # seeded
    short = oc.generate(model="stories260K", prompt="Once upon a time", options={"temperature": 0, "num_predict": 3})
    assert short.eval_count <= 3
    # A stop string ends the answer before it.
    full = oc.generate(model="stories260K", prompt="Once upon a time", options={"temperature": 0, "num_predict": 40})
    words = full.response.split()
    if len(words) > 3:
        cut = oc.generate(model="stories260K", prompt="Once upon a time",
                          options={"temperature": 0, "num_predict": 40, "stop": [words[2]]})
        assert words[2] not in cut.response and len(cut.response) < len(full.response)


def test_errors_in_ollamas_shape(server, oc):
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(model="llama3", messages=MESSAGES)
    assert e.value.status_code == 404 and "not found" in e.value.error
    status, _, body = server.request("POST", "/api/generate", {"model": "stories260K", "prompt": "x", "format": "yaml"})
    assert status == 400 and "format" in json.loads(body)["error"]
    for extra in ({"images": ["aGk="]}, {"tools": [{"type": "function"}]},
                  {"options": {"mirostat": 2}}):
        status, _, body = server.request("POST", "/api/generate", {"model": "stories260K", "prompt": "x", **extra})
        assert status == 400, (extra, body)
        assert "not supported" in json.loads(body)["error"]
    with pytest.raises(ollama.ResponseError) as e:
        oc.generate(model="stories260K", prompt="x", images=["aGk="])
    assert e.value.status_code == 400
