#!/usr/bin/env python3
"""Sampled JSON documents under schemas with ranges and formats, at temperature 1: how many are
complete and valid, and how many are cut off by max_tokens (spent on whitespace or digits), with
the default bounded whitespace and with `--json-whitespace any`, side by side.

  tests/e2e/.venv/bin/python bench/structured_sampling.py [--model M.gguf] [--seeds 4] [--max-tokens 200]

Needs the e2e environment's `jsonschema` (make test creates it). Prints a table per mode and writes
bench/out/structured_sampling.json.
"""
import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parents[1]

SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                "age": {"type": "integer", "minimum": 0, "maximum": 150}},
               "required": ["name", "age"]},
    "rating": {"type": "object", "properties": {"stars": {"type": "number", "minimum": 0, "maximum": 5},
                                                "votes": {"type": "integer", "minimum": 1}},
               "required": ["stars", "votes"]},
    "place": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                               "lon": {"type": "number", "minimum": -180, "maximum": 180}},
              "required": ["lat", "lon"]},
    "price": {"type": "object", "properties": {"item": {"type": "string", "maxLength": 16},
                                               "price": {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": 0},
                                               "qty": {"type": "integer", "minimum": 1, "maximum": 100}},
              "required": ["item", "price", "qty"]},
    "reading": {"type": "object", "properties": {"celsius": {"type": "number", "exclusiveMinimum": -273.15,
                                                             "maximum": 100.5}},
                "required": ["celsius"]},
    "contact": {"type": "object", "properties": {"email": {"type": "string", "format": "email"},
                                                 "site": {"type": "string", "format": "uri"}},
                "required": ["email", "site"]},
    "event": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"},
                                               "host": {"type": "string", "format": "ipv4"}},
              "required": ["at", "host"]},
    "scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 10}, "minItems": 1, "maxItems": 5},
    "settings": {"type": "object", "properties": {"dark": {"type": "boolean"}, "level": {"enum": ["low", "mid", "high"]},
                                                  "volume": {"type": "integer", "multipleOf": 5, "minimum": 0,
                                                             "maximum": 100}},
                 "required": ["dark", "level", "volume"]},
    "order": {"type": "object", "properties": {
        "id": {"type": "integer", "exclusiveMinimum": 1000, "exclusiveMaximum": 10000},
        "lines": {"type": "array", "maxItems": 3, "items": {
            "type": "object", "properties": {"sku": {"type": "string", "maxLength": 8},
                                             "n": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "n"]}}},
        "required": ["id", "lines"]},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def run_mode(binary, model, whitespace, seeds, max_tokens):
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", str(port), "--json-whitespace", whitespace],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        rows = []
        for name, schema in SCHEMAS.items():
            for seed in range(seeds):
                r = post(port, {"messages": [{"role": "user", "content": f"Give me one {name} record as JSON."}],
                                "max_tokens": max_tokens, "temperature": 1.0, "seed": seed,
                                "response_format": {"type": "json_schema",
                                                    "json_schema": {"name": name, "schema": schema}}})
                choice, text = r["choices"][0], r["choices"][0]["message"]["content"] or ""
                row = {"schema": name, "seed": seed, "finish": choice["finish_reason"],
                       "tokens": r["usage"]["completion_tokens"], "blanks": sum(c in " \t\r\n" for c in text),
                       "chars": len(text), "valid": False}
                if row["finish"] == "stop":
                    try:
                        # Decimals on both sides: multipleOf 0.25 is exact, not a float quotient.
                        jsonschema.validate(json.loads(text, parse_float=Decimal),
                                            json.loads(json.dumps(schema), parse_float=Decimal),
                                            format_checker=jsonschema.FormatChecker())
                        row["valid"] = True
                    except Exception as e:  # noqa: BLE001 - reported, not raised
                        row["error"] = str(e)[:200]
                rows.append(row)
        return rows
    finally:
        proc.terminate()
        proc.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=200)
    a = ap.parse_args()
    out = {}
    for mode in ("bounded", "any"):
        rows = run_mode(a.bin, a.model, mode, a.seeds, a.max_tokens)
        out[mode] = rows
        n = len(rows)
        valid = sum(r["valid"] for r in rows)
        cut = sum(r["finish"] == "length" for r in rows)
        blanks = sum(r["blanks"] for r in rows) / max(1, sum(r["chars"] for r in rows))
        tokens = sorted(r["tokens"] for r in rows)
        print(f"| {mode} | {n} | {valid} | {cut} | {n - valid - cut} | {100 * blanks:.0f}% | "
              f"{tokens[len(tokens) // 2]} / {tokens[-1]} |", flush=True)
        for r in rows:
            if r["finish"] == "stop" and not r["valid"]:
                print("  invalid:", r["schema"], r["seed"], r.get("error"), file=sys.stderr)
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "structured_sampling.json").write_text(json.dumps(out, indent=1))
    print("columns: mode | documents | complete and valid | cut off by max_tokens | complete but invalid | "
          "blank share of the text | tokens median / max")


if __name__ == "__main__":
    sys.exit(main())
