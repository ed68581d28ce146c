"""Tool calling with the real `openai` client, for four template families (the real templates in
../shared/templates: Qwen 2.5 = Hermes <tool_call>, Llama 3.1 JSON, Mistral [TOOL_CALLS], Gemma 2
= the generic JSON form): with tool_choice "required" or a named function the answer is tool
calls whose arguments validate against the function's schema, whole and streamed (the client's
own types parse them), and the calls and their results go back through the template."""
import json

import jsonschema
import openai
import pytest

from conftest import SHARED, STORIES, Server

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                        "days": {"type": "integer", "minimum": 1}},
                       "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                           "required": ["zone"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILIES = ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
            "google-gemma-2-2b-it"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    template = SHARED / "templates" / f"{request.param}.jinja"
    if not template.exists():
        pytest.skip("../shared/templates is not available")
    s = Server(STORIES, extra=["--chat-template", str(template), "--kv-mem", "32M"], log_name="tools")
    yield s, s.client(), s.client().models.list().data[0].id
    assert s.stop() == 0


def finished(make, seeds=range(8)):
    """The first answer, over a few seeds, that ended by itself rather than at max_tokens: the small
    model can ramble inside a string, but not on every seed. None finishing fails the test."""
    for seed in seeds:
        r = make(seed)
        if r is not None:
            return r
    pytest.fail(f"no answer finished within max_tokens on seeds {list(seeds)}")


def check_call(call, name=None):
    assert call.type == "function" and call.id
    if name:
        assert call.function.name == name
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])


def test_required_and_named(family):
    _, client, model = family
    done = 0
    for seed in range(4):
        r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=160, seed=seed, temperature=1.0)
        choice = r.choices[0]
        if choice.finish_reason == "length":
            continue
        assert choice.finish_reason == "tool_calls"
        assert len(choice.message.tool_calls) == 1
        check_call(choice.message.tool_calls[0])
        done += 1
    assert done >= 2

    def named(seed):
        r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=160, seed=seed,
                                           parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
        return None if r.choices[0].finish_reason == "length" else r

    r = finished(named)
    assert r.choices[0].finish_reason == "tool_calls"
    check_call(r.choices[0].message.tool_calls[0], "get_time")


def test_streamed_calls_add_up(family):
    _, client, model = family

    def streamed(seed):
        calls, finish = {}, None
        for chunk in client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                                    tool_choice="required", parallel_tool_calls=False, max_tokens=160,
                                                    seed=seed, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            for tc in delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    c["id"], c["name"] = tc.id, tc.function.name
                c["arguments"] += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        return None if finish == "length" else (calls, finish)

    calls, finish = finished(streamed, seeds=range(2, 10))
    assert finish == "tool_calls" and len(calls) == 1
    c = calls[0]
    assert c["id"] and c["name"] in SCHEMAS
    jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])


def test_calls_and_results_go_back_through_the_template(family):
    _, client, model = family

    def first(seed):
        r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=160, seed=seed)
        return None if r.choices[0].finish_reason == "length" else r

    msg = finished(first).choices[0].message
    assert msg.tool_calls, "tool_choice required answered without a call"
    call = msg.tool_calls[0]
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"ok": True})},
    ]
    r = client.chat.completions.create(model=model, messages=history, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str)


def test_bad_tools_are_refused(family):
    _, client, model = family
    cases = [({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
             ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
             ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
             ({"tool_choice": "required"}, "tool_choice"),
             ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string",
                                                                                      "format": "hostname"}}}],
               "tool_choice": "required"}, "tools")]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, **extra)
        assert e.value.body["param"] == param, (extra, e.value.body)


def test_forced_calls_end_instead_of_repeating(family):
    """tool_choice "required" with parallel calls allowed (the default): a call that repeats an
    earlier one ends the answer (finish_reason "tool_calls", well before max_tokens) instead of
    being repeated until max_tokens; no answer has two identical calls, and call syntax never
    shows up as text, also when max_tokens cuts a call."""
    _, client, model = family
    ended_early = 0
    for seed in range(6):
        for stream in (False, True):
            kw = dict(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300,
                      seed=seed, temperature=1.0)
            if stream:
                calls, content, finish = {}, "", None
                for chunk in client.chat.completions.create(stream=True, **kw):
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    content += delta.content or ""
                    for tc in delta.tool_calls or []:
                        c = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                        c["name"] += (tc.function.name or "") if tc.function else ""
                        c["arguments"] += (tc.function.arguments or "") if tc.function else ""
                    finish = chunk.choices[0].finish_reason or finish
                pairs = [(c["name"], json.dumps(json.loads(c["arguments"]), sort_keys=True))
                         for c in calls.values() if finish == "tool_calls"]
            else:
                r = client.chat.completions.create(**kw)
                content, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
                pairs = [(c.function.name, json.dumps(json.loads(c.function.arguments), sort_keys=True))
                         for c in r.choices[0].message.tool_calls or []]
                ended_early += finish == "tool_calls" and r.usage.completion_tokens < 300
            assert len(pairs) == len(set(pairs)), (seed, stream, pairs)
            assert "tool_call" not in content and '"name"' not in content, (seed, stream, content)
    assert ended_early >= 3, ended_early
    # Cut by max_tokens in the middle of a call: no text, no call, finish_reason "length".
    r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                       max_tokens=6, seed=1)
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.tool_calls and not (r.choices[0].message.content or "")
