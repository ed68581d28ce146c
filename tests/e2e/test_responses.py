"""OpenAI's Responses API with the real `openai` client: responses.create plain and streamed
(typed events), message-list input, previous_response_id conversations, and refused fields."""
import json

import openai
import pytest

INPUT = "Tell me a story."


def test_create_plain(client, model_id):
    r = client.responses.create(model=model_id, input=INPUT, max_output_tokens=16, temperature=0,
                                instructions="You tell stories.")
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert isinstance(r.output_text, str) and r.output_text
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert 0 < r.usage.output_tokens <= 16 and r.usage.input_tokens > 5
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    # The same conversation as a message list with text parts renders the same prompt.
    again = client.responses.create(model=model_id, max_output_tokens=16, temperature=0,
                                    instructions="You tell stories.",
                                    input=[{"role": "user", "content": [{"type": "input_text", "text": INPUT}]}])
    assert again.output_text == r.output_text and again.usage.input_tokens == r.usage.input_tokens


def test_create_streamed_events(client, model_id):
    whole = client.responses.create(model=model_id, input=INPUT, max_output_tokens=12, temperature=0)
    events = list(client.responses.create(model=model_id, input=INPUT, max_output_tokens=12, temperature=0,
                                          stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_previous_response_id_continues(client, model_id):
    first = client.responses.create(model=model_id, input=INPUT, max_output_tokens=8, temperature=0)
    second = client.responses.create(model=model_id, input="And then?", max_output_tokens=8, temperature=0,
                                     previous_response_id=first.id)
    assert second.previous_response_id == first.id
    # The second prompt holds the first exchange: more input tokens than the question alone.
    alone = client.responses.create(model=model_id, input="And then?", max_output_tokens=8, temperature=0)
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model_id, input="x", previous_response_id="resp_nothing")
    assert e.value.body["param"] == "previous_response_id"
    # store=false leaves nothing to continue from.
    unstored = client.responses.create(model=model_id, input=INPUT, max_output_tokens=4, store=False)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model_id, input="x", previous_response_id=unstored.id)


def test_refused_fields(client, model_id):
    cases = [{"tools": [{"type": "web_search_preview"}]},
             {"text": {"format": {"type": "xml"}}}, {"reasoning": {"effort": "low"}},
             {"truncation": "auto"}]
    for extra in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model=model_id, input="x", max_output_tokens=4, **extra)
        assert e.value.body["param"].startswith(next(iter(extra))), extra
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model_id, input=[{"type": "file_search_call", "id": "c"}])


TIME_TOOL = {"type": "function", "name": "get_time", "description": "The time in a zone",
             "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}


def test_function_tools(client, model_id):
    """tool_choice "required": the output is function_call items (the client's own types), whole and
    streamed (output_item.added / function_call_arguments.delta / .done / output_item.done); their
    outputs go back as function_call_output items, with previous_response_id or in full."""
    done = 0
    for seed in range(4):
        r = client.responses.create(model=model_id, input="What time is it?", tools=[TIME_TOOL],
                                    tool_choice="required", max_output_tokens=400, temperature=1.0 - 0.1 * seed)
        calls = [o for o in r.output if o.type == "function_call"]
        if r.status != "completed":
            continue
        done += 1
        assert calls and all(c.name == "get_time" and json.loads(c.arguments)["zone"] in ("UTC", "CET") for c in calls)
        assert len({(c.name, c.arguments) for c in calls}) == len(calls)  # no repeats
        assert r.tools[0].name == "get_time" and r.tool_choice == "required"
        follow = client.responses.create(
            model=model_id, previous_response_id=r.id, max_output_tokens=8,
            input=[{"type": "function_call_output", "call_id": c.call_id, "output": "12:00"} for c in calls])
        assert follow.status in ("completed", "incomplete")
        full = client.responses.create(
            model=model_id, max_output_tokens=8,
            input=[{"role": "user", "content": "What time is it?"},
                   *[{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
                     for c in calls],
                   *[{"type": "function_call_output", "call_id": c.call_id, "output": "12:00"} for c in calls]])
        assert full.usage.input_tokens > follow.usage.input_tokens - 50
    assert done >= 2
    events, args = [], {}
    with client.responses.stream(model=model_id, input="What time is it?", tools=[TIME_TOOL], tool_choice="required",
                                 max_output_tokens=400) as stream:
        for ev in stream:
            events.append(ev.type)
            if ev.type == "response.function_call_arguments.delta":
                args[ev.item_id] = args.get(ev.item_id, "") + ev.delta
        final = stream.get_final_response()
    if final.status == "completed":
        calls = [o for o in final.output if o.type == "function_call"]
        assert calls and events.count("response.function_call_arguments.done") == len(calls)
        assert all(args[c.id] == c.arguments for c in calls)
        assert events[-1] == "response.completed"
