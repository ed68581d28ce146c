"""Ollama's model management with its own client (ollama 0.6): create a model over the served one
with a system prompt and parameters, copy it, list and show it, chat with it, delete it; pull a
GGUF over HTTP (a local file server) with streamed progress; bad requests in Ollama's error shape.
The catalog lives in a folder of the test's (--ollama-models)."""
import functools
import http.server
import shutil
import threading

import ollama
import pytest

from conftest import API_KEY, STORIES, Server


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ollama_models")
    cache = tmp / "cache"
    s = Server(STORIES, extra=["--ollama-models", str(tmp / "catalog"), "--kv-mem", "32M"], log_name="ollama-models")
    s.cache = cache
    yield s, tmp
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def client(s):
    return ollama.Client(host=s.base_url, headers={"Authorization": f"Bearer {API_KEY}"})


def names(oc):
    return {m.model for m in oc.list().models}


def test_create_copy_show_chat_delete(env):
    s, tmp = env
    oc = client(s)
    progress = [p.status for p in oc.create(model="storyteller", from_="stories260K", system="You tell stories.",
                                           parameters={"temperature": 0, "num_predict": 8}, stream=True)]
    assert progress[-1] == "success" and "writing manifest" in progress
    assert "storyteller:latest" in names(oc)
    shown = oc.show("storyteller")
    assert "temperature 0" in shown.parameters and "num_predict 8" in shown.parameters
    # The entry's defaults apply: num_predict 8 bounds the answer; temperature 0 makes it repeatable.
    a = oc.generate(model="storyteller", prompt="Once upon a time", raw=True)
    b = oc.generate(model="storyteller", prompt="Once upon a time", raw=True)
    assert a.eval_count == 8 and a.response == b.response
    # ... and the request's own options win.
    assert oc.generate(model="storyteller", prompt="Once", raw=True, options={"num_predict": 3}).eval_count == 3
    chat = oc.chat(model="storyteller:latest", messages=[{"role": "user", "content": "Hi"}])
    assert chat.message.role == "assistant" and chat.eval_count == 8
    assert oc.copy("storyteller", "storyteller-2").status == "success"
    assert {"storyteller:latest", "storyteller-2:latest"} <= names(oc)
    assert oc.generate(model="storyteller-2", prompt="Once upon a time", raw=True).response == a.response
    assert oc.delete("storyteller").status == "success"
    assert "storyteller:latest" not in names(oc) and "storyteller-2:latest" in names(oc)
    # The catalog survives a restart.
    s2 = Server(STORIES, extra=["--ollama-models", str(tmp / "catalog"), "--kv-mem", "32M"], log_name="ollama-models-2")
    try:
        assert "storyteller-2:latest" in names(client(s2))
    finally:
        assert s2.stop() == 0


def test_create_with_a_jinja_template(env):
    s, _ = env
    oc = client(s)
    tpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "
    assert oc.create(model="bracketed", from_="stories260K", template=tpl, system="Be brief.").status == "success"
    assert oc.show("bracketed").template == tpl
    r = oc.chat(model="bracketed", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})
    rendered = "[system] Be brief.\n[user] Hi\n[assistant] "
    status, t = s.json("POST", "/tokenize", {"prompt": rendered})
    assert status == 200 and r.prompt_eval_count == len(t["tokens"])
    with pytest.raises(ollama.ResponseError) as e:
        oc.create(model="broken", from_="stories260K", template="{% for m in messages %}")
    assert e.value.status_code == 400 and "template" in e.value.error
    oc.delete("bracketed")


def test_errors_are_ollamas_shape(env):
    s, _ = env
    oc = client(s)
    with pytest.raises(ollama.ResponseError) as e:
        oc.delete("no-such-model")
    assert e.value.status_code == 404 and "not found" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oc.copy("no-such-model", "x")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        oc.delete("stories260K")
    assert e.value.status_code == 400 and "being served" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oc.create(model="m", from_="stories260K", template="{{ .Prompt }}")
    assert e.value.status_code == 400 and "template" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oc.create(model="m", from_="stories260K", parameters={"temperature": "hot"})
    assert e.value.status_code == 400
    status, body = s.json("POST", "/api/create", {"model": "m", "from": "nope", "stream": False})
    assert status == 404 and "nope" in body["error"]
    status, body = s.json("POST", "/api/create", {"model": "../evil", "from": "stories260K", "stream": False})
    assert status == 400 and body["error"]
    with pytest.raises(ollama.ResponseError) as e:
        oc.pull("library/llama3")
    assert e.value.status_code == 404 and "hf://" in e.value.error


@pytest.fixture()
def file_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(STORIES, root / "tiny.gguf")
    (root / "junk.gguf").write_bytes(b"not a gguf file at all")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_pull_streams_progress_and_the_pulled_model_answers(tmp_path, file_server):
    # Its own server and cache, so that the download is real every run.
    s = Server(STORIES, extra=["--ollama-models", str(tmp_path / "catalog"), "--kv-mem", "32M"], log_name="pull",
               env={"KVASIR_CACHE_DIR": str(tmp_path / "cache")})
    try:
        oc = client(s)
        steps = list(oc.pull(f"{file_server}/tiny.gguf", stream=True))
        assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
        sizes = [p for p in steps if p.total]
        assert sizes and sizes[-1].completed == sizes[-1].total == STORIES.stat().st_size
        pulled = [m for m in oc.list().models if m.model.startswith("127.0.0.1")]
        assert len(pulled) == 1 and pulled[0].size == STORIES.stat().st_size
        # The same weights as the served model: it answers like it.
        name = pulled[0].model
        want = oc.generate(model="stories260K", prompt="Once", raw=True, options={"temperature": 0, "num_predict": 6})
        got = oc.generate(model=name, prompt="Once", raw=True, options={"temperature": 0, "num_predict": 6})
        assert got.response == want.response
        with pytest.raises(ollama.ResponseError) as e:
            oc.pull(f"{file_server}/junk.gguf")
        assert "not a model" in e.value.error
        assert oc.delete(name).status == "success"
        assert not list((tmp_path / "cache").rglob("tiny.gguf"))  # the pulled file went with it
    finally:
        assert s.stop() == 0
