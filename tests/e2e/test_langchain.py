"""LangChain's ChatOpenAI pointed at kvasir: with_structured_output with a pydantic model, by
function calling (a named tool_choice) and by json_schema (response_format), returns typed
objects; the Qwen 2.5 template gives the Hermes tool syntax."""
import pytest

from conftest import SHARED, STORIES, Server

langchain_openai = pytest.importorskip("langchain_openai")
pydantic = pytest.importorskip("pydantic")


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    legs: int


@pytest.fixture(scope="module")
def qwen_server():
    template = SHARED / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
    if not template.exists():
        pytest.skip("../shared/templates is not available")
    s = Server(STORIES, extra=["--chat-template", str(template), "--kv-mem", "32M"], log_name="langchain")
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_with_structured_output(qwen_server, method):
    parsed = 0
    for seed in range(4):
        llm = langchain_openai.ChatOpenAI(base_url=qwen_server.base_url + "/v1", api_key=qwen_server.api_key,
                                          model="stories260K", max_tokens=100, temperature=1.0, seed=seed,
                                          max_retries=0)
        out = llm.with_structured_output(Pet, method=method, include_raw=True).invoke("Describe a pet.")
        if out["parsed"] is not None:
            assert isinstance(out["parsed"], Pet)
            parsed += 1
    assert parsed >= 2
