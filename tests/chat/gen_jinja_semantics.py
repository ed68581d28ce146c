#!/usr/bin/env python3
"""Regenerates jinja_semantics.json: snippets rendered by Python Jinja2 configured the way Hugging Face
applies chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now at 2026-11-29 08:36:42).

    python3 tests/chat/gen_jinja_semantics.py > tests/chat/jinja_semantics.json

Each entry: template, optional extra context, and either `expected` (the rendering) or `error`
(the Python exception class). The C++ test renders each with the same context and compares.
"""
import copy
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime(2026, 11, 29, 8, 36, 42).strftime(fmt)


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body (the index tracking is left out)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = strftime_now

CONTEXT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi <b>there</b> & 'you'"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
        {"role": "tool", "content": "{\"temp\": 21.5}"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nIt is 21.5°C."},
    ],
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "tools": None,
    "n": 3,
    "f": 2.5,
    "s": "Héllo Wörld",
    "d": {"b": 1, "a": [1, 2, {"c": None}]},
    "empty": [],
    "t": True,
    "nested": {"x": {"y": {"z": "deep"}}},
    "nums": [3, 1, 2, 5, 4],
    "words": ["banana", "Apple", "cherry", "apple"],
    "users": [{"name": "bob", "age": 30}, {"name": "alice", "age": 25}, {"name": "carol", "age": 30}],
    "text": "  line one\nline two\n\n  line four  ",
}

# (template) or (template, extra_context)
SNIPPETS = [
    # ----- whitespace control, trim_blocks, lstrip_blocks, comments, raw -----
    "a\n{% if t %}\nb\n{% endif %}\nc",
    "a\n  {% if t %}\n  b\n  {% endif %}\nc",
    "a  {%- if t -%}  b  {%- endif -%}  c",
    "x {{- ' y ' -}} z",
    "x\n\n{{- 'y' }}\n\nz",
    "x {#- comment -#} y",
    "x\n  {# comment #}\ny",
    "x {# multi\nline #} y",
    "a\n  {%+ if t %}b{% endif %}",
    "a{% if t +%}\nb{% endif %}",
    "  {% for i in [1,2] %}\n  {{ i }}\n  {% endfor %}\n",
    "{% raw %}{{ not rendered }} {% if %}{% endraw %}",
    "a\n  {% raw %}\n {{ x }}\n  {% endraw %}\nb",
    "{%- raw -%}  {{ x }}  {%- endraw -%}",
    "line\r\nwith crlf\r\n{{ 1 }}\r\n",
    "trailing newline kept once?\n\n",
    "{{ 'a' }}\n",
    "\t{% if t %}tab{% endif %}",
    "x   {{ 1 }}   y",
    "{% if t %}   \n{% endif %}",
    "a {% if t -%}\n\n  b{%- endif %} c",
    "{{- 'only' -}}",
    "{# just a comment #}",
    "{%- if t %}{{ 'a' }}\n{%- endif %}",
    # ----- literals and printing -----
    "{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}",
    "{{ 1.5 }} {{ 1e3 }} {{ 2.5e-3 }} {{ 1.0 }} {{ 10.0 / 4 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }}",
    "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 100.0 }} {{ 123456789.123 }} {{ -0.0 }} {{ 1e300 * 1e10 }}",
    "{{ true }} {{ false }} {{ none }} {{ True }} {{ False }} {{ None }}",
    "{{ 'single' }} {{ \"double\" }} {{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }}",
    "{{ 'tab\\there' }}|{{ 'nl\\nhere' }}|{{ 'back\\\\slash' }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ '\\101' }}",
    "{{ 'unknown \\d escape' }} {{ 'a' 'b' \"c\" }}",
    "{{ [1, 'a', 1.5, none, true] }}",
    "{{ {'k': 'v', 'n': 1} }} {{ {} }} {{ [] }} {{ () }}",
    "{{ (1,) }} {{ (1, 2) }} {{ 1, 2 }}",
    "{{ ['it\\'s', \"q\\\"\", 'both \\' \"'] }}",
    "{{ ['nl\\n', 'tab\\t', 'bell\\a', 'é', '\\u200b', '\\x7f'] }}",
    "{{ {'a': [1, {'b': (2, 3)}]} }}",
    "{{ d }} {{ users[0] }}",
    "{{ messages[2].tool_calls }}",
    "{{ s }} {{ n }} {{ f }} {{ t }}",
    # ----- arithmetic -----
    "{{ 7 + 3 }} {{ 7 - 3 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}",
    "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ - n }} {{ + n }}",
    "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ 'x' * -1 }}",
    "{{ true + 1 }} {{ true * 3 }} {{ 1 + 1.5 }} {{ 10 / 5 }}",
    "{{ 1 ~ 2 ~ 'x' ~ none ~ true ~ undefined_var ~ [1] }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ 1 / 0 }}",
    "{{ 1 // 0 }}",
    "{{ 1 % 0 }}",
    "{{ [1] + (2,) }}",
    "{{ none + 1 }}",
    "{{ undefined_var + 1 }}",
    "{{ -'x' }}",
    "{{ 'n=%d s=%s f=%.2f r=%r x=%x %%' % (5, 'str', 3.14159, 'q', 255) }}",
    "{{ '%5s|%-5s|%05d|%+d|% d|%.3s' % ('ab', 'ab', 42, 7, 7, 'abcdef') }}",
    "{{ '%(a)s and %(b)s' % {'a': 1, 'b': 'two'} }}",
    "{{ '%s' % [1, 2] }} {{ '%s' % none }} {{ 'x%sy' % 'M' }} {{ 'no specifiers' % [1] }} {{ 'u%su' % undefined_var }}",
    "{{ '%d' % undefined_var }}",
    "{{ '%s %s' % ('one',) }}",
    "{{ '%d' % 'x' }}",
    "{{ 'no args' % 5 }}",
    "{{ '%e|%g|%G|%.0f|%#x|%o|%c' % (12345.678, 0.00001234, 1e20, 2.5, 255, 8, 65) }}",
    # ----- comparisons, logic -----
    "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == [1, 2] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 == true }}",
    "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'b' in d }} {{ 'zz' in d }} {{ 1 in (1, 2) }}",
    "{{ none == none }} {{ none == 0 }} {{ undefined_var == undefined_other }} {{ undefined_var == none }} {{ undefined_var != 1 }}",
    "{{ {'a': 1} == {'a': 1} }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1] == [1.0] }} {{ 'a' == 'A' }}",
    "{{ 1 < 'a' }}",
    "{{ 'ab' in none }}",
    "{{ 1 in 'abc' }}",
    "{{ 'x' in undefined_var }}",
    "{{ [1] < 2 }}",
    "{{ true and 'yes' }} {{ false and 'yes' }} {{ 0 or 'fallback' }} {{ 'first' or 'second' }} {{ none or none }}",
    "{{ not true }} {{ not 0 }} {{ not [] }} {{ not 'x' }} {{ not undefined_var }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if empty else 'no' }} {{ 'a' if false }}|",
    "{{ 1 if false else 2 if false else 3 }} {{ (1 if t else 2) + 10 }}",
    "{{ undefined_var or 'default' }} {{ (undefined_var and 'x') is defined }}",
    # ----- variables, attributes, items, slicing -----
    "{{ d.b }} {{ d['b'] }} {{ d.a[2].c }} {{ nested.x.y.z }} {{ nested['x']['y'] }}",
    "{{ users[1].name }} {{ users[-1]['age'] }} {{ messages[0].role }} {{ messages.0.role }}",
    "{{ d.missing }}|{{ d['missing'] }}|{{ users[10] }}|{{ s[100] }}|{{ n.real_attr }}",
    "{{ d.missing.deeper }}",
    "{{ undefined_var.attr }}",
    "{{ undefined_var['k'] }}",
    "{{ undefined_var() }}",
    "{{ d.items }}|{{ d.get('b') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}",
    "{{ 'abc'[0] }} {{ 'abc'[-1] }} {{ 'héllo'[1] }} {{ s[0] }}",
    "{{ nums[1:3] }} {{ nums[:2] }} {{ nums[3:] }} {{ nums[::-1] }} {{ nums[::2] }} {{ nums[-2:] }} {{ nums[1:-1] }}",
    "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ s[::-1] }} {{ 'hello'[-3:] }} {{ 'hello'[10:] }}|{{ (1, 2, 3)[1:] }}",
    "{{ nums[5:1:-1] }} {{ nums[::-2] }} {{ nums[1:2:3] }} {{ nums[-100:100] }} {{ 'abc'[5:] }}|{{ nums[none:2] }}",
    "{{ 'abc'[::0] }}",
    "{{ n[1:] }}",
    "{{ d[1:] }}",
    "{{ undefined_var[1:] }}",
    "{{ nums['a':] }}",
    "{{ range(10)[::-1] }} {{ range(1, 10, 2)[1:3] }} {{ range(4)[:2] | list }}",
    "{{ range(10)[2:5] | list }} {{ range(10)[-1] }}",
    "{{ messages[1:] | length }} {{ messages[-1].content[-5:] }}",
    "{{ d['a'][0:2] }} {{ users | map(attribute='name') | list }}",
    "{{ messages.append }}|{{ d.update }}|{{ d.__class__ }}|",
    "{{ messages.append(1) }}",
    "{{ d.pop('b') }}",
    "{{ d._private }}|{{ {'_x': 1}._x }}",
    "{{ ''.__class__.__mro__ }}",
    # ----- if / elif / else -----
    "{% if n > 5 %}big{% elif n > 2 %}mid{% elif n > 0 %}small{% else %}zero{% endif %}",
    "{% if empty %}x{% else %}empty{% endif %} {% if undefined_var %}x{% else %}undef{% endif %}",
    "{% if d %}d{% endif %}{% if {} %}e{% endif %}{% if '' %}f{% endif %}{% if 0.0 %}g{% endif %}{% if ' ' %}h{% endif %}",
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}",
    "{% if not add_generation_prompt is defined %}undef{% else %}{{ add_generation_prompt }}{% endif %}",
    "{% if n is odd and s is string or false %}yes{% endif %}",
    "{% if 1, 2 %}tuple{% endif %}",
    # ----- for loops -----
    "{% for x in nums %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{% for x in 'abc' %}{{ loop.index }}{{ x }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in [1, 2, 3] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}",
    "{% for x in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }};{% endfor %}",
    "{% for x in [] %}x{% else %}none{% endfor %} {% for x in undefined_var %}x{% else %}undef{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }};{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }};{% endfor %}",
    "{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
    "{% for x in nums if x > 2 %}{{ x }}:{{ loop.index }}/{{ loop.length }};{% endfor %}",
    "{% for x in nums if x > 100 %}{{ x }}{% else %}filtered-out{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ m.role }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for x in nums %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}else runs: no iteration reached the end{% endfor %}",
    "{% for x in [1, 2] %}{% continue %}{% else %}else runs{% endfor %}|{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{% else %}no else{% endfor %}",
    "{% for i in [1, 2, 3] %}{% filter upper %}a{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endfilter %}{% endfor %}",
    "{% for i in [1, 2, 3] %}{% set x %}a{{ i }}{% if i == 2 %}{% continue %}{% endif %}{% endset %}[{{ x }}]{% endfor %}",
    "{% for i in [1, 2, 3] %}{% with a = i %}{{ a }}{% if i == 2 %}{% break %}{% endif %}{% endwith %}{% endfor %}",
    "{% for x in 'ab' %}[{% for k in [] %}{% else %}{{ x }}{% continue %}{% endfor %}]{% endfor %}",
    "{% for x in nums %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for i in range(3) %}{% for j in range(2) %}{{ i }}{{ j }}({{ loop.index }}) {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for x in nums %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
    "{% for x in [1, 2] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
    "{% for x in [1] %}{{ loop }}{% endfor %}",
    "{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}|{% endfor %}{{ x }}",
    "{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}|{% endfor %}{{ x }}",
    "{% for x in 5 %}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for a, b in [1, 2] %}{% endfor %}",
    "{% for a, b in [(1, 2, 3)] %}{% endfor %}",
    "{% for item in [{'name': 'a', 'children': [{'name': 'b', 'children': []}]}] recursive %}{{ item.name }}({{ loop.depth }}){% if item.children %}[{{ loop(item.children) }}]{% endif %}{% endfor %}",
    "{% for x in [1] %}{{ loop(x) }}{% endfor %}",
    "{% for x in range(2, 11, 3) %}{{ x }} {% endfor %}{{ range(5, 0, -2) | list }} {{ range(0) | list }}",
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}{% endif %}{% endfor %}",
    # ----- set, namespace, with -----
    "{% set x = 1 %}{% set y = x + 1 %}{{ x }}{{ y }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set c, d2 = [3, 4] %}{{ c }}{{ d2 }}",
    "{% set x %}block {{ n }} content{% endset %}[{{ x }}]",
    "{% set x | upper %}shout {{ n }}{% endset %}{{ x }}",
    "{% set x | trim | replace('a', 'b') %}  banana  {% endset %}[{{ x }}]",
    "{% set ns = namespace(count=0, items=[]) %}{% for i in nums %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} {{ ns.missing is defined }} {{ ns }}",
    "{% set ns = namespace({'k': 1}, j=2) %}{{ ns.k }}{{ ns.j }}{{ ns['k'] }}",
    "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'tool' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% set x = 1 %}{% set x.attr = 2 %}",
    "{% set messages = messages[1:] %}{{ messages | length }}",
    "{% if true %}{% set inner = 'from if' %}{% endif %}{{ inner }}",
    "{% for i in [1] %}{% set inner = 'loop' %}{% endfor %}[{{ inner }}]",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% set a = 10 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}",
    "{% set true = 1 %}",
    # ----- macros and call -----
    "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}",
    "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}",
    "{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1) | int }}{% endif %}{% endmacro %}{{ fact(6) }}",
    "{% macro m() %}{% set local = 1 %}{{ local }}{% endmacro %}{{ m() }}[{{ local }}]",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside {{ n }}{% endcall %}",
    "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m.name }} {{ m.arguments }} {{ m }}",
    "{% macro render_json(v) %}{% if v is mapping %}{% for k, x in v.items() %}{{ k }}:{{ render_json(x) }};{% endfor %}{% elif v is iterable and v is not string %}[{% for x in v %}{{ render_json(x) }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ render_json(d) }}",
    "{% macro m() %}x{% endmacro %}{{ m() ~ m() }} {{ (m() + 'y') | upper }}",
    # ----- filters -----
    "{{ '  padded  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ text | trim }}",
    "{{ s | length }} {{ nums | length }} {{ d | length }} {{ '' | count }} {{ undefined_var | length }}",
    "{{ s | upper }} {{ s | lower }} {{ 'hello world-foo(bar) [baz' | title }} {{ 'hELLO wORLD' | capitalize }} {{ \"they're bill's\" | title }}",
    "{{ nums | join(', ') }} {{ words | join }} {{ users | join(', ', attribute='name') }} {{ [1, none, 'x'] | join('-') }}",
    "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }} {{ s | replace('ö', 'oe') }}",
    "{{ undefined_var | default('dflt') }} {{ '' | default('dflt') }} {{ '' | default('dflt', true) }} {{ none | d('x') }} {{ false | d('x', boolean=true) }} {{ undefined_var | default }}|",
    "{{ d | items | list }} {{ undefined_var | items | list }}",
    "{{ 5 | items | list }}",
    "{{ users | selectattr('age', 'equalto', 30) | map(attribute='name') | list }}",
    "{{ users | rejectattr('age', 'equalto', 30) | list }} {{ users | selectattr('name') | list | length }}",
    "{{ messages | selectattr('role', 'eq', 'user') | list | length }} {{ messages | selectattr('tool_calls', 'defined') | list | length }}",
    "{{ nums | select('odd') | list }} {{ nums | reject('odd') | list }} {{ nums | select('gt', 2) | list }} {{ [0, 1, '', 'a', none] | select | list }}",
    "{{ nums | map('string') | join('') }} {{ words | map('upper') | list }} {{ ['a,b', 'c'] | map('replace', ',', ';') | list }}",
    "{{ users | map(attribute='missing', default='?') | list }} {{ users | map(attribute='name') | map('length') | list }}",
    "{{ nested | map(attribute='x') | list }}",
    "{{ words | first }} {{ words | last }} {{ [] | first }}|{{ 'abc' | first }} {{ 'abc' | last }} {{ d | first }}",
    "{{ nums | list }} {{ 'abc' | list }} {{ d | list }} {{ (1, 2) | list }}",
    "{{ 42 | string }} {{ none | string }} {{ [1, 'a'] | string }} {{ (3.0) | string }}",
    "{{ '42' | int }} {{ '42.9' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.99 | int }} {{ -3.99 | int }} {{ true | int }} {{ none | int }} {{ '0x1f' | int(0, 16) }} {{ '0x1f' | int(base=0) }} {{ ' 12 ' | int }} {{ '1_000' | int }}",
    "{{ '3.5' | float }} {{ 'x' | float }} {{ 'x' | float(1.5) }} {{ 2 | float }} {{ ' 1e3 ' | float }} {{ 'inf' | float }} {{ none | float }}",
    "{{ -5 | abs }} {{ -2.5 | abs }} {{ 3 | abs }}",
    "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 3 | round }} {{ 1234.5 | round(-2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(0, 'floor') }} {{ -2.5 | round }} {{ 0.125 | round(2) }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb\\n\\nc' | indent(2, true) }}|{{ 'a\\nb\\n\\nc' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ', first=true) }}|{{ 'x' | indent }}|{{ '' | indent(first=true) }}|",
    "{{ '<a href=\"x\">&\\'</a>' | escape }} {{ '<b>' | e }} {{ none | e }} {{ '<i>' | safe }} {{ none | safe }}",
    "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ users | unique(attribute='age') | map(attribute='name') | list }}",
    "{{ nums | sort }} {{ nums | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }} {{ users | sort(attribute='age,name') | map(attribute='name') | list }}",
    "{{ [3, 'a'] | sort }}",
    "{{ 'abc' | reverse }} {{ nums | reverse | list }} {{ s | reverse }}",
    "{{ nums | min }} {{ nums | max }} {{ words | min }} {{ words | max(case_sensitive=true) }} {{ users | min(attribute='age') }} {{ [] | max }}|",
    "{{ nums | sum }} {{ users | sum(attribute='age') }} {{ [0.5, 1] | sum(start=10) }}",
    "{{ nums | batch(2) | list }} {{ nums | batch(2, 'x') | list }}",
    "{{ d | dictsort }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(true) }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}",
    "{{ 'one two  three' | wordcount }} {{ 'hello' | center(11) }}| {{ 'abc' | center(6) }}|",
    "{{ nums | truncate(9) }} {{ 0 | map('string') | list }} {{ none | select | list }}",
    "{{ 5 | truncate(2) }}",
    "{{ nums | indent }}",
    "{{ 5 | indent }}",
    "{{ undefined_var | indent }}",
    "{{ undefined_var | dictsort }}",
    "{{ undefined_var | round }}",
    "{{ 'a long sentence here' | truncate(9) }} {{ 'a long sentence here' | truncate(9, true) }} {{ 'a long sentence here' | truncate(12, false, '…', 0) }}",
    "{{ '%s-%s' | format('a', 'b') }} {{ '%(x)s' | format(x=1) }}",
    "{{ d | attr('items') is defined }} {{ d | attr('b') }}|{{ users[0] | attr('name') }}|",
    "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ 'é\"\\n' | tojson }} {{ none | tojson }} {{ [1.0, 2.5, true] | tojson }} {{ (1, 2) | tojson }}",
    "{{ {'b': 1, 'a': {'d': 1, 'c': 2}} | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} {{ d | tojson(indent='\\t') }} {{ [] | tojson(indent=2) }} {{ {} | tojson(indent=2) }}",
    "{{ 'é€😀' | tojson(ensure_ascii=true) }} {{ '\\x00\\x1f\\x7f' | tojson }} {{ {1: 'int key', none: 'n', true: 'b', 2.5: 'f'} | tojson }}",
    "{{ d | tojson(indent=0) }} {{ [1, [2, [3]]] | tojson(indent=1) }}",
    "{{ undefined_var | tojson }}",
    "{{ nums | select('odd') | tojson }}",
    "{{ messages | tojson }}",
    "{{ 'x' | nonexistent_filter }}",
    "{% if false %}{{ 'x' | nonexistent_filter }}{% endif %}ok",
    "{% if true %}{{ 'x' | nonexistent_filter }}{% endif %}",
    "{{ 'x' is nonexistent_test }}",
    "{% for x in [] %}{{ x | nonexistent_filter }}{% endfor %}",
    "{{ x | nonexistent_filter if false else 'ok' }}",
    "{% filter upper %}inside {{ n }} filter{% endfilter %}",
    "{% filter trim | replace(' ', '_') %}  a b c  {% endfilter %}",
    "{{ nums | select('odd') }}",
    "{{ nums | select('odd') | length }}",
    "{% if nums | select('gt', 100) %}generator is truthy{% endif %}",
    "{% set g = nums | select('odd') %}{{ g | list }}{{ g | list }}",
    "{{ nums | reverse }}",
    "{{ [1,2] | last }} {{ nums | select('odd') | first }}",
    "{{ nums | select('odd') | last }}",
    "{{ range(3) }} {{ range(1, 7, 2) }} {{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.items() | length }}",
    "{{ range(100001) | length }}",
    "{{ range(3.5) }}",
    # ----- tests -----
    "{{ undefined_var is defined }} {{ n is defined }} {{ undefined_var is undefined }} {{ none is none }} {{ 0 is none }}",
    "{{ 's' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 'x' is number }}",
    "{{ 1 is integer }} {{ true is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }}",
    "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}",
    "{{ d is mapping }} {{ nums is mapping }} {{ nums is sequence }} {{ 'x' is sequence }} {{ d is sequence }} {{ 1 is sequence }} {{ undefined_var is sequence }}",
    "{{ nums is iterable }} {{ 'x' is iterable }} {{ d is iterable }} {{ 1 is iterable }} {{ none is iterable }} {{ undefined_var is iterable }} {{ (nums | select('odd')) is iterable }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3.0 is odd }}",
    "{{ 2 in [1, 2] }} {{ 2 is in [1, 2] }} {{ 'a' is in 'abc' }} {{ 3 is in nums }}",
    "{{ 1 is == 1 }}",
    "{{ 1 is equalto 1 }} {{ 1 is eq 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is le 2 }} {{ 3 is gt 2 }} {{ 2 is ge 3 }} {{ 1 is lessthan 2 }} {{ 1 is greaterthan 2 }}",
    "{{ nums | select('<', 3) | list }} {{ nums | select('<=', 3) | list }} {{ nums | select('>', 3) | list }} {{ nums | select('>=', 3) | list }} {{ nums | select('!=', 3) | list }} {{ nums | select('==', 3) | list }} {{ nums | reject('lessthan', 3) | list }}",
    "{{ 'x' is escaped }} {{ ('<a>' | forceescape) }} {{ 'ß'.casefold() }} {{ 'hello'.rindex('l') }} {{ '12'.isnumeric() }} {{ '1.5'.isdecimal() }} {{ '{a}-{b}'.format_map({'a': 1, 'b': 2}) }}",
    "{{ nums.sort() }}",
    "{{ d.setdefault('x', 1) }}",
    "{{ d.clear }}|{{ nums.reverse is defined }}|{{ nums.insert is undefined }}",
    "{{ 'abc' is lower }} {{ 'Abc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }}",
    "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas 1 }} {{ d is sameas d }}",
    "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ 1 is callable }}",
    "{{ n is not none }} {{ n is not string }} {{ not n is string }}",
    "{{ messages[2].content is none }} {{ messages[2].content is not none }} {{ messages[2].tool_calls is defined }} {{ messages[0].tool_calls is defined }}",
    "{{ 'x' is odd }}",
    "{{ undefined_var is odd }}",
    # ----- string methods -----
    "{{ 'Hello'.startswith('He') }} {{ 'Hello'.startswith(('x', 'H')) }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.startswith('l', 2) }} {{ 'Hello'.endswith('ll', 0, 4) }}",
    "[{{ '  x  '.strip() }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\nq\\n'.lstrip('\\n') }}][{{ 'abcba'.strip('ab') }}]",
    "[{{ '\u3000x\u00a0'.strip() }}][{{ 'éxé'.strip('é') }}][{{ 'ab\u2028'.rstrip() }}][{{ '\u2003 y'.lstrip() }}][{{ '€€'.strip('€') }}][{{ 'a€b'.strip('ab') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ '  a  b  '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a  b  '.split(none, 1) }} {{ ''.split(',') }} {{ ''.split() }}",
    "{{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ 'a\\nb'.splitlines(true) }}",
    "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ \"they're bill's\".title() }} {{ 'hello WORLD'.capitalize() }} {{ 'Hello'.swapcase() }} {{ 'ß'.upper() }} {{ 'ǅ'.lower() }}",
    "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'abc'.replace('', '-') }}",
    "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'hello'.find('l', 3) }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }}",
    "{{ 'hello'.index('z') }}",
    "{{ ', '.join(['a', 'b']) }} {{ ''.join(words) }}",
    "{{ ', '.join([1, 2]) }}",
    "{{ '{} and {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.2f}|{:,}'.format('r', 'l', 'c', 42, 3.14159, 1234567) }}",
    "{{ '{0[a]} {0.b}'.format({'a': 1, 'b': 2}) }} {{ '{!r}'.format('q') }} {{ '{{}}'.format() }}",
    "{{ '{}'.format() }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }} {{ ''.isdigit() }} {{ 'Title Case'.istitle() }}",
    "{{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }}| {{ 'ab'.rjust(4) }}",
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }}",
    "{{ 'prefix-body'.removeprefix('prefix-') }} {{ 'body.txt'.removesuffix('.txt') }}",
    "{{ messages[4].content.split('</think>')[-1].lstrip('\\n') }}|{{ messages[4].content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
    "{{ 'abc'.nonexistent }}|",
    "{{ 'abc'.nonexistent() }}",
    # ----- dict / list methods -----
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.copy() }}",
    "{% for k, v in d.items() %}{{ k }}{% endfor %} {{ 'b' in d.keys() }}",
    "{{ nums.index(5) }} {{ nums.count(3) }} {{ (1, 2, 1).count(1) }}",
    "{{ nums.index(99) }}",
    "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict(d, z=0) }}",
    # ----- globals -----
    "{{ raise_exception('custom failure') }}",
    "{% if messages | length > 2 %}{{ raise_exception('Too many messages: ' ~ (messages | length)) }}{% endif %}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%B %d, %Y') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %j %p %I') }}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
    "{% set j = joiner(', ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}",
    # ----- errors with positions -----
    "{% if %}",
    "{% if true %}unclosed",
    "{% for x in y %}{% endif %}",
    "{{ 1 + }}",
    "{{ 'unterminated }}",
    "{% endfor %}",
    "{% unknown_tag %}",
    "{% generation %}a{% endgeneration %}",
    "{% for m in messages %}{% generation %}{{ m.role }}{% set inner = 1 %}{% endgeneration %}{{ inner }};{% endfor %}",
    "{% break %}",
    "{% include 'other.jinja' %}",
    "{{ (1 }}",
    "{{ [1, 2 }}",
    "{{ a.b.c( }}",
    "{# unterminated comment",
    "{{ x |}}",
    "{{ 1 is }}",
    "{% macro m(a=1, b) %}{% endmacro %}",
    "{% set 1 = 2 %}",
    "{{ 'a' ! 'b' }}",
    "{% for %}",
    "line1\nline2 {{ undefined_var.attr }}",
    # ----- chat-template idioms -----
    "{{- bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + (message['content'] or '') | trim + '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
    "{%- for message in messages %}\n    {%- if message.role == 'assistant' and message.tool_calls is defined %}\n        {{- '[TOOL_CALLS]' + message.tool_calls | tojson }}\n    {%- elif message.content is string %}\n        {{- message.role + ': ' + message.content + '\\n' }}\n    {%- endif %}\n{%- endfor %}",
    "{%- set loop_messages = messages[1:] if messages[0].role == 'system' else messages %}{{ loop_messages | map(attribute='role') | join(',') }}",
    "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}{{ ns.last_user }}",
    "{{ (messages | selectattr('role', 'equalto', 'tool') | list | last).content | tojson }}",
    "{%- for m in messages %}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{%- endif %}{%- endfor %}",
    ("{%- if tools %}{{ tools | tojson(indent=4) }}{% endif %}",
     {"tools": [{"type": "function", "function": {"name": "f", "description": "d\u00e9", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]}),
    ("{% for tool in tools %}{% for key, val in tool.function.items() if key != 'description' %}{{ key }}={{ val | tojson }};{% endfor %}{% endfor %}",
     {"tools": [{"type": "function", "function": {"name": "f", "description": "x", "parameters": {}}}]}),
    ("{{ enable_thinking is defined and enable_thinking is false }}", {"enable_thinking": False}),
    ("{{ documents | length if documents else 'no docs' }}", {"documents": None}),
    ("{% for doc in documents %}{{ doc.title | default('untitled') }}: {{ doc['text'] }}\n{% endfor %}",
     {"documents": [{"text": "a"}, {"title": "T", "text": "b"}]}),
]


def render(template, context):
    try:
        return {"expected": ENV.from_string(template).render(**context)}
    except Exception as e:  # the reference failed: record the exception class
        return {"expected": None, "error": type(e).__name__, "message": str(e)}


def main():
    out = []
    for item in SNIPPETS:
        template, extra = (item, {}) if isinstance(item, str) else item
        context = copy.deepcopy(CONTEXT)  # some filters mutate lists in place (indent on a list)
        context.update(copy.deepcopy(extra))
        entry = {"template": template}
        if extra:
            entry["context"] = extra
        entry.update(render(template, context))
        out.append(entry)
    json.dump({"context": CONTEXT, "cases": out}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
