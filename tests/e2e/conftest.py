"""Fixtures for the end-to-end tests: a `kvasir serve` process on a free loopback port, and OpenAI
clients pointed at it. The binary and the shared models come from the environment (run.sh sets
them): KVASIR_BIN, KVASIR_SHARED_DIR, KVASIR_SOURCE_DIR."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from openai import OpenAI

SOURCE_DIR = Path(os.environ.get("KVASIR_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("KVASIR_BIN", str(SOURCE_DIR / "build" / "bin" / "kvasir"))
SHARED = Path(os.environ.get("KVASIR_SHARED_DIR", SOURCE_DIR.parent / "shared"))
STORIES = SHARED / "models" / "stories260K.gguf"
GEMMA = SOURCE_DIR / "models" / "gemma-3-270m-q4_k_m.gguf"
API_KEY = "e2e-secret"
MAX_BODY = 1 << 20


def wait_for(pred, timeout=15.0, every=0.05):
    """Polls `pred` until it holds or `timeout` seconds pass; returns its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(every)
    return bool(pred())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `kvasir serve`; `stop()` sends SIGTERM and returns the exit code."""

    def __init__(self, model, extra=(), api_key=API_KEY, log_name="server", max_body=MAX_BODY, host="127.0.0.1",
                 launcher=(), env=None):
        self.port = free_port()
        self.api_key = api_key
        self.host = host
        # launcher: a command the server runs under, e.g. ("ip", "netns", "exec", NAME).
        args = [*launcher, BIN, "serve", "-m", str(model), "--host", host, "--port", str(self.port),
                "--max-body", str(max_body), *extra]
        if api_key:
            args += ["--api-key", api_key]
        self.log_path = Path(os.environ.get("KVASIR_E2E_LOGS", "/tmp")) / f"kvasir-e2e-{log_name}-{self.port}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **env} if env else None)
        self.wait_ready()

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvasir serve exited with {self.proc.returncode}: {self.log_path.read_text()}")
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("kvasir serve did not become healthy: " + self.log_path.read_text())

    def request(self, method, path, body=None, headers=None, auth=True, timeout=60):
        """A raw HTTP request: (status, headers, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = dict(headers or {})
        if auth and self.api_key:
            h.setdefault("Authorization", f"Bearer {self.api_key}")
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def json(self, method, path, body=None, **kw):
        status, _, data = self.request(method, path, body, **kw)
        return status, json.loads(data) if data else None

    def metrics(self):
        """Samples of /metrics as {name{labels}: value}, labels without model_name."""
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            name, _, labels = key.partition("{")
            labels = ",".join(l for l in labels.rstrip("}").split(",") if l and not l.startswith("model_name="))
            out[name + ("{" + labels + "}" if labels else "")] = float(value)
        return out

    def client(self, **kw):
        return OpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "none", max_retries=0, timeout=120, **kw)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    if not Path(BIN).exists():
        pytest.fail(f"no kvasir binary at {BIN}")
    s = Server(STORIES, extra=["--max-seqs", "64", "--kv-mem", "64M"], log_name="stories")
    yield s
    code = s.stop()
    assert code == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture(scope="session")
def model_id(client):
    return client.models.list().data[0].id
