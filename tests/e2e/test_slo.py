"""Serving under SLOs through the HTTP API: tenants from the key file share a seat fairly, a request
whose TTFT forecast misses its deadline gets 429 with Retry-After at once, batch work yields to
interactive work, and /metrics counts goodput per class and tenant. One seat (--max-seqs 1) makes
every ordering observable; the default model's decode (tens of ms a token) keeps a 2,000-token
stream running for the whole test."""
import http.client
import json

from conftest import GEMMA, Server, wait_for

PROMPT = "Once upon a time"


def open_stream(s, key, **fields):
    """Starts a streamed completion; returns (connection, response) with the headers read."""
    body = {"model": "gemma-3-270m-q4_k_m", "prompt": PROMPT, "max_tokens": 2000, "stream": True, "ignore_eos": True,
            "temperature": 0, **fields}
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    return conn, r


def first_token(r):
    """Reads the stream until its first data event."""
    while True:
        line = r.readline()
        assert line, "stream ended"
        if line.startswith(b"data: "):
            return line


def post(s, key, **fields):
    body = {"model": "gemma-3-270m-q4_k_m", "prompt": PROMPT, "max_tokens": 4, "temperature": 0, **fields}
    return s.request("POST", "/v1/completions", body, headers={"Authorization": f"Bearer {key}"}, auth=False)


def make_server(tmp_path, extra=()):
    keys = tmp_path / "keys"
    keys.write_text("flood-key name=flood\npolite-key name=polite weight=2\nbatch-key name=nightly tier=batch\n")
    return Server(GEMMA, extra=["--api-key-file", str(keys), "--metrics-public", "--max-seqs", "1", "--kv-mem", "64M",
                                "--max-model-len", "4096", *extra],
                  api_key=None, log_name="slo")


def test_fair_share_admission_and_goodput(tmp_path):
    s = make_server(tmp_path)
    streams = []
    try:
        # Bad fields are named.
        status, _, data = post(s, "flood-key", service_tier="platinum")
        assert status == 400 and json.loads(data)["error"]["param"] == "service_tier"
        status, _, data = post(s, "flood-key", ttft_deadline_ms=-1)
        assert status == 400 and json.loads(data)["error"]["param"] == "ttft_deadline_ms"
        assert post(s, "polite-key", ttft_deadline_ms=60000)[0] == 200  # warms the step costs

        # The flood holds the only seat and queues three more.
        running = open_stream(s, "flood-key")
        first_token(running[1])
        for _ in range(3):
            streams.append(open_stream(s, "flood-key"))
        assert wait_for(lambda: s.metrics()["kvasir:num_requests_waiting"] == 3), s.metrics()

        # Its next request cannot get a first token within 50 ms: refused at once.
        status, headers, data = post(s, "flood-key", ttft_deadline_ms=50)
        assert status == 429, data
        assert json.loads(data)["error"]["code"] == "exhausted"
        assert int(headers["Retry-After"]) >= 1

        # The polite tenant's request goes to the seat before the flood's queue when it frees. It
        # asks to wait (deadline 0): the seat frees when the test closes the running stream, not
        # when the forecast says (the 2,000-token stream's end).
        polite = open_stream(s, "polite-key", ttft_deadline_ms=0)
        assert wait_for(lambda: s.metrics()["kvasir:num_requests_waiting"] == 4), s.metrics()
        running[0].close()
        first_token(polite[1])
        assert s.metrics()["kvasir:num_requests_waiting"] == 3  # the flood's three still wait
        polite[0].close()
        m = s.metrics()
        key = 'kvasir:slo_requests_total{service_class="interactive",tenant="%s",result="%s"}'
        assert m[key % ("flood", "refused")] == 1
        assert m[key % ("polite", "met")] >= 1
    finally:
        for conn, _ in streams:
            conn.close()
        assert wait_for(lambda: s.metrics()["kvasir:kv_cache_usage_perc"] == 0), s.metrics()
        assert s.stop() == 0


def test_batch_work_yields_its_seat(tmp_path):
    s = make_server(tmp_path)
    try:
        batch = open_stream(s, "batch-key")  # the key's tier: batch
        first_token(batch[1])
        # An interactive request takes the seat within a step: it is answered while the batch
        # stream, preempted, waits to resume.
        status, _, data = post(s, "flood-key", max_tokens=8)
        assert status == 200, data
        m = s.metrics()
        assert m["kvasir:num_yields_total"] == 1
        assert wait_for(lambda: s.metrics()["kvasir:num_requests_running"] == 1)  # the batch stream is back
        for _ in range(3):
            assert batch[1].readline() is not None
        batch[0].close()
    finally:
        assert wait_for(lambda: s.metrics()["kvasir:kv_cache_usage_perc"] == 0), s.metrics()
        assert s.stop() == 0
