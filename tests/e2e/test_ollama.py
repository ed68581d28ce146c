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


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def test_chat_takes_tools_and_tool_history(server, oc):
    """/api/chat with tools (Ollama has no tool_choice: the model may call them): the tools reach the
    prompt, a conversation with an earlier call and its result goes through the template, whole and
    streamed answers parse, any call comes back in Ollama's shape and validates, and call syntax never
    shows as text. /api/show lists the capability; an unknown /api route answers in Ollama's shape."""
    plain = oc.chat(model="stories260K", messages=MESSAGES, options=GREEDY)
    with_tools = oc.chat(model="stories260K", messages=MESSAGES, tools=[WEATHER], options=GREEDY)
    assert with_tools.prompt_eval_count > plain.prompt_eval_count  # the tools were described to the model
    history = MESSAGES + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                          "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    for stream in (False, True):
        for seed in range(4):
            opts = {**GREEDY, "temperature": 1.0, "seed": seed, "num_predict": 40}
            if stream:
                content, calls = "", []
                for part in oc.chat(model="stories260K", messages=history, tools=[WEATHER], options=opts, stream=True):
                    content += part.message.content or ""
                    calls += part.message.tool_calls or []
            else:
                r = oc.chat(model="stories260K", messages=history, tools=[WEATHER], options=opts)
                content, calls = r.message.content or "", r.message.tool_calls or []
            for c in calls:
                assert c.function.name == "get_weather" and isinstance(c.function.arguments["city"], str)
            assert "tool_calls" not in content
    assert "tools" in oc.show("stories260K").capabilities
    status, _, body = server.request("POST", "/api/pull", {"model": "x"})
    assert status == 404 and "error" in json.loads(body) and "message" not in json.loads(body)
